//! What packages and users read from the binary itself: `--version`, the completion scripts and
//! the man pages, generated from the same clap definitions as the flags.

mod common;
use common::{pathem, Dir};

#[test]
fn version_names_the_commit_and_the_dpdk_feature() {
    let out = pathem(&["--version"]);
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let want = format!("pathem {} (", env!("CARGO_PKG_VERSION"));
    let rest = line.trim_end().strip_prefix(&want).unwrap_or_else(|| panic!("{line:?}"));
    let inner = rest.strip_suffix(')').unwrap_or_else(|| panic!("{line:?}"));
    let (commit, dpdk) = match inner.strip_suffix(", dpdk") {
        Some(c) => (c, true),
        None => (inner, false),
    };
    assert_eq!(dpdk, cfg!(feature = "dpdk"), "{line:?}");
    let hex = commit.len() == 7 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    assert!(hex || commit == "unknown commit", "{line:?}");
}

#[test]
fn completions_and_man_pages_cover_every_subcommand() {
    for shell in ["bash", "zsh", "fish"] {
        let out = pathem(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8(out.stdout).unwrap();
        for word in ["replay", "attach", "--class", "--netem"] {
            assert!(text.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = pathem(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
    let d = Dir::new();
    let dir = d.s("man");
    assert!(pathem(&["manpages", &dir]).status.success());
    for page in ["pathem", "pathem-run", "pathem-attach", "pathem-replay", "pathem-probe-send", "pathem-ctl"]
    {
        let text = std::fs::read_to_string(d.path(&format!("man/{page}.1"))).unwrap();
        assert!(text.starts_with(".ie") || text.contains(".TH"), "{page} is a man page");
        assert!(text.contains(&page.to_uppercase()) || text.contains(page), "{page}");
    }
    let run = std::fs::read_to_string(d.path("man/pathem-run.1")).unwrap();
    assert!(run.contains("class") && run.contains("netem"), "the flags are in pathem-run(1)");
}

/// The binary parses, calls a library and prints (the design's "< 1 000 lines"): what does
/// more belongs in a library crate, where the other front ends and the tests reach it too.
#[test]
fn the_command_line_crate_stays_a_front_end() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lines: usize = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    assert!(lines < 1000, "crates/pathem/src has {lines} lines: move what is not parsing or printing out");
}
