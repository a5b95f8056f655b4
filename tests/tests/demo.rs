//! `slurm-conf/demo`, as a newcomer runs it: the same jobs on a busy local cluster with cinch in
//! shadow mode and then enforcing, side by side. Its verdict must show the benefit it claims
//! (the network-heavy job in one rack instead of two, the short job run before the long one),
//! and every reason it prints must read right. Runs on the host's Slurm only (the demo builds
//! against it): the 26.05 pass skips it.

use std::process::Command;

use cinch_e2e::repo_root;

#[test]
fn the_demo_shows_cinchs_benefit_side_by_side() {
    let dir = std::env::temp_dir().join(format!("cinch-demo-test-{}", std::process::id()));
    let out = Command::new(repo_root().join("slurm-conf/demo"))
        .env("CINCH_DEMO_DIR", &dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // One row per job: name | shadow: waited nodes racks | enforce: waited nodes racks.
    let row = |name: &str| -> Vec<String> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name} in:\n{stdout}"));
        line.split('|')
            .skip(1)
            .map(|side| {
                side.split_whitespace()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .map(|cells| cells.join(" "))
            .collect()
    };
    let cells = |side: &str| -> (u64, String, u32) {
        let parts: Vec<&str> = side.split(' ').collect();
        (
            parts[0].trim_end_matches('s').parse().unwrap(),
            parts[1].to_string(),
            parts[2].parse().unwrap(),
        )
    };
    let bert = row("bert-12gpu");
    let (_, _, racks_alone) = cells(&bert[0]);
    let (_, nodes, racks_cinch) = cells(&bert[1]);
    assert_eq!(racks_alone, 2, "premise: Slurm alone spreads it: {stdout}");
    // On the two nodes of one rack, whichever rack frees first.
    assert!(
        racks_cinch == 1 && ["n[1-2]", "n[3-4]"].contains(&nodes.as_str()),
        "{stdout}"
    );
    let (short_alone, _, _) = cells(&row("short-32gpu")[0]);
    let (short_cinch, _, _) = cells(&row("short-32gpu")[1]);
    assert!(
        short_cinch < short_alone,
        "the short job waits less with cinch ({short_cinch} s against {short_alone} s): {stdout}"
    );
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("In all: jobs waited "))
        .unwrap_or_else(|| panic!("no summary in {stdout}"));
    assert!(
        summary.ends_with(" ran across racks in shadow, 0 with cinch.")
            && !summary.contains("hold, 0 ran across racks in shadow"),
        "{summary}"
    );
    // What cinch said, in shadow and enforcing, reads right and in the golden words.
    let mut reasons = 0;
    for line in stdout.lines() {
        let Some(why) = line
            .trim_start()
            .strip_prefix("enforce: ")
            .or_else(|| line.trim_start().strip_prefix("shadow:  "))
        else {
            continue;
        };
        if why == "-" {
            continue;
        }
        reasons += 1;
        let problems = cinch_core::util::words::reason_problems(why);
        assert!(problems.is_empty(), "{problems:?}: {why}");
        // A shadow line is "would CHANGES: REASON" (the changes listed, then the reason).
        let reason = why
            .strip_prefix("would ")
            .and_then(|rest| rest.split_once(": "))
            .map_or(why, |(_, reason)| reason);
        let unknown = cinch_e2e::golden_reasons::unknown_fragments(reason);
        assert!(
            unknown.is_empty(),
            "words no golden reason has {unknown:?}: {why}"
        );
    }
    assert!(reasons >= 4, "the demo shows what cinch decided: {stdout}");
    assert!(
        !stderr.contains("no --cinch-* options"),
        "the demo builds the SPANK plugin: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
