//! `pathem completions SHELL` and `pathem manpages DIR`: what packages install, generated from
//! the clap definitions so they never drift from the flags.

use anyhow::Context;
use std::path::Path;

pub fn completions(shell: clap_complete::Shell, mut cmd: clap::Command) -> anyhow::Result<()> {
    clap_complete::generate(shell, &mut cmd, "pathem", &mut pathem_runtime::stdio::Stdout);
    Ok(())
}

/// `pathem.1` and one page per subcommand (`pathem-run.1`, `pathem-probe-send.1`, ...).
pub fn manpages(dir: &Path, cmd: clap::Command) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut cmd = cmd.version(env!("PATHEM_VERSION"));
    cmd.build();
    write_pages(dir, &cmd, "pathem")
}

fn write_pages(dir: &Path, cmd: &clap::Command, name: &str) -> anyhow::Result<()> {
    let page = cmd.clone().name(name.to_string()).bin_name(name.replace('-', " "));
    let path = dir.join(format!("{name}.1"));
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        write_pages(dir, sub, &format!("{name}-{}", sub.get_name()))?;
    }
    Ok(())
}
