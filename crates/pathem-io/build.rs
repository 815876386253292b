//! With the `dpdk` feature: finds DPDK with pkg-config and compiles the C shim against it.
//! Without it, does nothing: the default build needs no C library.

fn main() {
    #[cfg(feature = "dpdk")]
    dpdk();
}

#[cfg(feature = "dpdk")]
fn dpdk() {
    println!("cargo:rerun-if-changed=src/dpdk/shim.c");
    let find = |metadata: bool| {
        pkg_config::Config::new().atleast_version("22.11").cargo_metadata(metadata).probe("libdpdk")
    };
    let lib = match find(false) {
        Ok(lib) => lib,
        Err(e) => {
            println!(
                "cargo:warning=the dpdk feature needs DPDK 22.11 or newer found by pkg-config \
                 (Debian/Ubuntu: apt-get install libdpdk-dev pkg-config): {e}"
            );
            std::process::exit(1);
        }
    };
    let mut cc = cc::Build::new();
    cc.file("src/dpdk/shim.c").warnings(true).flag_if_supported("-Wno-unused-parameter");
    for p in &lib.include_paths {
        cc.include(p);
    }
    // DPDK's own flags (its config header, the instruction set its inline functions assume).
    let cflags = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut words = cflags.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-include" {
            if let Some(h) = words.next() {
                cc.flag("-include").flag(h);
            }
        } else if w.starts_with("-march") || w.starts_with("-m") || w.starts_with("-D") {
            cc.flag(w);
        }
    }
    cc.compile("pathem_dpdk_shim");
    // DPDK's libraries after the shim that needs them.
    let _ = find(true);
}
