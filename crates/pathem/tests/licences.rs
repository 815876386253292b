//! Every package in Cargo.lock carries a licence that `deny.toml` allows: the policy
//! `cargo deny check licenses` applies, checked here on every test run from `cargo metadata`
//! with the `spdx` crate cargo-deny evaluates licence expressions with.

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The licences `deny.toml` allows.
fn allowed() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deny.toml")).expect("deny.toml");
    let deny: toml::Table = text.parse().expect("deny.toml is TOML");
    deny["licenses"]["allow"]
        .as_array()
        .expect("[licenses] allow is a list")
        .iter()
        .map(|v| v.as_str().expect("a licence").to_string())
        .collect()
}

/// Whether the licence expression `expr` (crates.io's lax syntax: `MIT/Apache-2.0`) is
/// satisfied by `allowed`; `Err` when it is not an SPDX expression at all.
fn satisfied(expr: &str, allowed: &[String]) -> Result<bool, String> {
    let expr = spdx::Expression::parse_mode(expr, spdx::ParseMode::LAX).map_err(|e| e.to_string())?;
    Ok(expr.evaluate(|req| allowed.contains(&req.to_string())))
}

#[test]
fn the_policy_itself_refuses_what_it_does_not_list() {
    let allowed = allowed();
    assert_eq!(satisfied("MIT OR Apache-2.0", &allowed), Ok(true));
    assert_eq!(satisfied("MIT/Apache-2.0", &allowed), Ok(true));
    assert_eq!(satisfied("Apache-2.0 WITH LLVM-exception", &allowed), Ok(true));
    assert_eq!(satisfied("GPL-3.0-only", &allowed), Ok(false));
    assert_eq!(satisfied("MIT AND GPL-2.0-only", &allowed), Ok(false));
    assert_eq!(satisfied("MIT OR LGPL-2.1-or-later", &allowed), Ok(true));
    assert!(satisfied("not a licence ((", &allowed).is_err());
}

#[test]
fn every_dependency_has_an_allowed_licence() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(repo())
        .output()
        .expect("cargo metadata runs");
    // Offline, as tests never reach the network: scripts/test.sh fetches every platform's
    // packages first (`cargo fetch --locked`); a build alone fetches only this platform's.
    assert!(
        out.status.success(),
        "cargo metadata (run `cargo fetch --locked` first): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let members: Vec<&str> =
        meta["workspace_members"].as_array().unwrap().iter().filter_map(|m| m.as_str()).collect();
    let allowed = allowed();
    let mut refused = Vec::new();
    let packages = meta["packages"].as_array().unwrap();
    for p in packages {
        let name = format!("{} {}", p["name"].as_str().unwrap_or("?"), p["version"].as_str().unwrap_or("?"));
        let Some(licence) = p["license"].as_str() else {
            refused.push(format!("{name}: no licence expression"));
            continue;
        };
        if members.contains(&p["id"].as_str().unwrap_or("")) {
            assert_eq!(licence, "MIT OR Apache-2.0", "{name}: pathem's own crates");
        }
        match satisfied(licence, &allowed) {
            Ok(true) => {}
            Ok(false) => refused.push(format!("{name}: {licence}")),
            Err(e) => refused.push(format!("{name}: {licence:?} is not an SPDX expression ({e})")),
        }
    }
    assert!(packages.len() > 100, "cargo metadata lists the whole lock file: {}", packages.len());
    assert!(refused.is_empty(), "licences deny.toml does not allow:\n{}", refused.join("\n"));
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(repo().join(file).is_file(), "{file}");
    }
}
