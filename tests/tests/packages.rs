//! The Debian packages `slurm-conf/make-debs` builds (docs/install.md): their dependencies, and
//! what an admin gets from `dpkg -i` — the packages are installed on this machine, a local
//! cluster runs the installed plugin, SPANK plugin and optimizer, a job goes through them, and
//! the packages are removed again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cinch_e2e::{cinch_record, repo_root, run_ok, Cluster, ClusterSpec};

const PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

fn field(deb: &Path, name: &str) -> String {
    run_ok(Command::new("dpkg-deb").arg("--field").arg(deb).arg(name))
        .trim()
        .to_string()
}

/// Removes the packages whatever happens to the test.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "cinch-job-submit", "cinch-spank", "cinch"])
            .output();
    }
}

#[test]
fn the_packages_install_and_a_job_runs_through_the_installed_plugin() {
    let out = std::env::temp_dir().join(format!("cinch-debs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let built = run_ok(
        Command::new(repo_root().join("slurm-conf/make-debs"))
            .args(["--debug", "--out"])
            .arg(&out),
    );
    let debs: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    assert_eq!(debs.len(), 3, "{built}");
    let deb = |name: &str| {
        debs.iter()
            .find(|d| field(d, "Package") == name)
            .unwrap_or_else(|| panic!("no {name} package in {built}"))
            .clone()
    };
    let slurmctld = run_ok(Command::new("dpkg-query").args(["-W", "-f=${Version}", "slurmctld"]));
    assert_eq!(
        field(&deb("cinch-job-submit"), "Depends"),
        format!("slurmctld (= {slurmctld})"),
        "the plugin loads only into the slurmctld it was built for"
    );
    assert!(field(&deb("cinch-spank"), "Depends").starts_with("slurm-client (>= 22.05)"));

    let _installed = Installed;
    run_ok(Command::new("dpkg").arg("-i").args(&debs));
    let user = run_ok(Command::new("getent").args(["passwd", "cinch"]));
    assert!(user.contains("/var/lib/cinch"), "{user}");
    let state = run_ok(Command::new("stat").args(["-c", "%U %a", "/var/lib/cinch"]));
    assert_eq!(state.trim(), "cinch 700");
    assert!(Path::new("/etc/cinch/cinch-serve.toml").is_file());
    let unit = std::fs::read_to_string("/lib/systemd/system/cinch.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/cinch serve"), "{unit}");

    let cluster = Cluster::up(ClusterSpec {
        nodes: 2,
        gpus_per_node: 2,
        racks: 1,
        optimizer: true,
        installed: Some([
            PathBuf::from(PLUGIN_DIR).join("job_submit_cinch.so"),
            PathBuf::from(PLUGIN_DIR).join("spank_cinch.so"),
            PathBuf::from("/usr/bin/cinch"),
        ]),
        ..ClusterSpec::default()
    });
    let id = cluster.sbatch(&["--gres=gpu:1", "--cinch-app=bert"], "true");
    let job = cluster.wait_done(id, Duration::from_secs(60));
    assert_eq!(job.get("JobState"), "COMPLETED", "{job:?}");
    assert_eq!(job.get("Comment"), "cinch:app=bert", "{job:?}");
    assert_eq!(
        cinch_record(job.get("AdminComment"))
            .get("gpus")
            .map(String::as_str),
        Some("1"),
        "{job:?}"
    );
    assert!(
        cluster
            .slurmctld_log()
            .contains("job_submit/cinch: loaded cinch"),
        "the installed plugin loaded"
    );
}
