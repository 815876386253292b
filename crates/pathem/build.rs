//! Puts the version line `pathem --version` prints into `PATHEM_VERSION`: the crate's version,
//! the commit it was built from (`unknown commit` outside a git checkout, e.g. from a source
//! tarball: never a build failure) and whether the DPDK feature is in.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let commit = git(&["rev-parse", "--short=7", "HEAD"]).unwrap_or_else(|| "unknown commit".into());
    let dpdk = if std::env::var_os("CARGO_FEATURE_DPDK").is_some() { ", dpdk" } else { "" };
    println!("cargo:rustc-env=PATHEM_VERSION={version} ({commit}{dpdk})");
    // Built again when the commit changes (HEAD, or the branch it points at).
    println!("cargo:rerun-if-env-changed=GIT_DIR");
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        for f in [dir.join("HEAD"), dir.join("packed-refs")] {
            if f.exists() {
                println!("cargo:rerun-if-changed={}", f.display());
            }
        }
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]).map(|r| dir.join(r)).filter(|r| r.exists()) {
            println!("cargo:rerun-if-changed={}", r.display());
        }
    } else {
        println!("cargo:rerun-if-changed=build.rs");
    }
}
