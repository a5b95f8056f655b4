//! The Debian packages `slurm-conf/make-debs` builds (docs/install.md): their dependencies, and
//! what an admin gets from `dpkg -i` — the packages are installed on this machine, a local
//! cluster runs the installed plugin, SPANK plugin and optimizer, a job goes through them, and
//! the packages are removed again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cinch_e2e::{cinch_record, repo_root, run_ok, Cluster, ClusterSpec};

const PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

/// Where the packages go: the host's Slurm, or the Slurm root of `CINCH_SLURM_ROOT` (the test
/// command's 24.11 and 26.05 passes), whose files the host sees under `<root>/root`.
struct Target {
    root: Option<PathBuf>,
}

impl Target {
    fn from_env() -> Target {
        Target {
            root: std::env::var_os("CINCH_SLURM_ROOT").map(PathBuf::from),
        }
    }

    /// A command run on the target system (inside the root when there is one).
    fn command(&self, program: &str) -> Command {
        match &self.root {
            Some(root) => {
                let mut c = Command::new("chroot");
                c.arg(root.join("root")).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    /// Runs a slurm-conf packaging script (`make-debs`, `make-rpms`) for the target's Slurm,
    /// a debug build into `out`: the packages' paths, one per line.
    fn make_packages(&self, script: &str, out: &Path) -> String {
        let mut make = Command::new(repo_root().join("slurm-conf").join(script));
        make.args(["--debug", "--out"]).arg(out);
        if let Some(root) = &self.root {
            make.arg("--slurm-root").arg(root);
        }
        run_ok(&mut make)
    }

    /// A path of the target system as the host sees it.
    fn path(&self, path: &str) -> PathBuf {
        match &self.root {
            Some(root) => root.join("root").join(path.trim_start_matches('/')),
            None => PathBuf::from(path),
        }
    }
}

fn field(deb: &Path, name: &str) -> String {
    run_ok(Command::new("dpkg-deb").arg("--field").arg(deb).arg(name))
        .trim()
        .to_string()
}

/// Removes the packages whatever happens to the test.
struct Installed<'a>(&'a Target);

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .command("dpkg")
            .args(["--purge", "cinch-job-submit", "cinch-spank", "cinch"])
            .output();
    }
}

#[test]
fn the_packages_install_and_a_job_runs_through_the_installed_plugin() {
    let out = std::env::temp_dir().join(format!("cinch-debs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let target = Target::from_env();
    let built = target.make_packages("make-debs", &out);
    let all: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    assert_eq!(
        all.len(),
        6,
        "three packages and their debug symbols: {built}"
    );
    let (dbgsyms, debs): (Vec<PathBuf>, Vec<PathBuf>) = all
        .into_iter()
        .partition(|d| field(d, "Package").ends_with("-dbgsym"));
    assert_eq!(debs.len(), 3, "{built}");
    let deb = |name: &str| {
        debs.iter()
            .find(|d| field(d, "Package") == name)
            .unwrap_or_else(|| panic!("no {name} package in {built}"))
            .clone()
    };
    let slurmctld = run_ok(
        target
            .command("dpkg-query")
            .args(["-W", "-f=${Version}", "slurmctld"]),
    );
    let (major_minor, _) = slurmctld.rsplit_once('.').expect("a Slurm version");
    assert_eq!(
        field(&deb("cinch-job-submit"), "Depends"),
        format!("slurmctld (= {slurmctld})"),
        "the plugin loads only into the slurmctld it was built for"
    );
    let spank_depends = field(&deb("cinch-spank"), "Depends");
    assert!(
        spank_depends.starts_with(&format!("slurm-client (>= {major_minor})")),
        "{spank_depends}"
    );

    for (package, files) in [
        (
            "cinch-job-submit",
            &[format!("{PLUGIN_DIR}/job_submit_cinch.so")][..],
        ),
        (
            "cinch-spank",
            &[
                format!("{PLUGIN_DIR}/spank_cinch.so"),
                "/usr/bin/cinch-watch".to_string(),
            ][..],
        ),
        ("cinch", &["/usr/bin/cinch".to_string()][..]),
    ] {
        let listing = run_ok(Command::new("dpkg-deb").arg("--contents").arg(deb(package)));
        assert!(
            listing.contains(&format!("./usr/share/doc/{package}/copyright")),
            "{package} has its copyright file: {listing}"
        );
        let symbols = dbgsyms
            .iter()
            .find(|d| field(d, "Package") == format!("{package}-dbgsym"))
            .unwrap_or_else(|| panic!("no {package}-dbgsym in {built}"));
        assert_eq!(
            field(symbols, "Depends"),
            format!("{package} (= {})", field(&deb(package), "Version"))
        );
        let debug = run_ok(Command::new("dpkg-deb").arg("--contents").arg(symbols));
        assert_eq!(
            debug.matches(".debug\n").count(),
            files.len(),
            "one debug file per packaged binary: {debug}"
        );
    }
    let cinch_files = run_ok(Command::new("dpkg-deb").arg("--contents").arg(deb("cinch")));
    for file in [
        "./usr/share/man/man1/cinch.1.gz",
        "./usr/share/man/man5/cinch-serve.toml.5.gz",
        "./usr/share/doc/cinch/users.md",
        "./usr/share/doc/cinch/policies/qos.md",
        "./usr/share/doc/cinch/openapi.json",
    ] {
        assert!(cinch_files.contains(file), "{file} in {cinch_files}");
    }
    assert!(run_ok(
        Command::new("dpkg-deb")
            .arg("--contents")
            .arg(deb("cinch-job-submit"))
    )
    .contains("./usr/share/man/man5/cinch.conf.5.gz"));
    let spank_files = run_ok(
        Command::new("dpkg-deb")
            .arg("--contents")
            .arg(deb("cinch-spank")),
    );
    for file in [
        "./usr/lib/cinch/cinch-mps-prolog",
        "./usr/lib/cinch/cinch-task-prolog",
        "./usr/bin/cinch-watch",
        "./usr/share/man/man1/cinch-watch.1.gz",
    ] {
        assert!(spank_files.contains(file), "{file} in {spank_files}");
    }

    let _installed = Installed(&target);
    // dpkg inside the root reads the packages through the bind-mounted /tmp.
    run_ok(target.command("dpkg").arg("-i").args(&debs));
    // What is installed is stripped: no DWARF left, only the build id that finds it.
    for file in [
        format!("{PLUGIN_DIR}/job_submit_cinch.so"),
        format!("{PLUGIN_DIR}/spank_cinch.so"),
        "/usr/bin/cinch".to_string(),
        "/usr/bin/cinch-watch".to_string(),
    ] {
        let sections = run_ok(Command::new("readelf").arg("-S").arg(target.path(&file)));
        assert!(!sections.contains(".debug_info"), "{file} is not stripped");
        let notes = run_ok(Command::new("readelf").arg("-n").arg(target.path(&file)));
        assert!(notes.contains("Build ID"), "{file}: {notes}");
    }
    // The installed docs are whole: every link between them resolves.
    let doc_dir = target.path("/usr/share/doc/cinch");
    for doc in run_ok(Command::new("find").arg(&doc_dir).args(["-name", "*.md"])).lines() {
        let doc = Path::new(doc);
        let text = std::fs::read_to_string(doc).unwrap();
        for link in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
        {
            let path = link.split('#').next().unwrap_or("");
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                continue;
            }
            assert!(
                doc.parent().unwrap().join(path).exists(),
                "{}: link {link} leads nowhere in the installed docs",
                doc.display()
            );
        }
    }
    let user = run_ok(target.command("getent").args(["passwd", "cinch"]));
    assert!(user.contains("/var/lib/cinch"), "{user}");
    let state = run_ok(
        target
            .command("stat")
            .args(["-c", "%U %a", "/var/lib/cinch"]),
    );
    assert_eq!(state.trim(), "cinch 700");
    assert!(target.path("/etc/cinch/cinch-serve.toml").is_file());
    let unit = std::fs::read_to_string(target.path("/lib/systemd/system/cinch.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/cinch serve"), "{unit}");

    let cluster = Cluster::up(ClusterSpec {
        nodes: 2,
        gpus_per_node: 2,
        racks: 1,
        optimizer: true,
        installed: Some([
            target.path(&format!("{PLUGIN_DIR}/job_submit_cinch.so")),
            target.path(&format!("{PLUGIN_DIR}/spank_cinch.so")),
            target.path("/usr/bin/cinch"),
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
    drop(cluster);
    // Removal stops the service (prerm) and keeps its state; purge removes the state.
    let prerm = std::fs::read_to_string(target.path("/var/lib/dpkg/info/cinch.prerm")).unwrap();
    assert!(prerm.contains("systemctl stop cinch.service"), "{prerm}");
    run_ok(target.command("dpkg").args(["--remove", "cinch"]));
    assert!(target.path("/var/lib/cinch").is_dir(), "kept on remove");
    run_ok(target.command("dpkg").args(["--purge", "cinch"]));
    assert!(!target.path("/var/lib/cinch").exists(), "removed on purge");
    let _ = std::fs::remove_dir_all(&out);
}

/// The RPMs `slurm-conf/make-rpms` builds from slurm-conf/cinch.spec (docs/install.md, "RHEL,
/// Rocky, Alma: RPMs") for this pass's Slurm: what each requires, holds and runs, and what
/// erasing them leaves. Installed into a scratch rpm root (this is a Debian host: the
/// scriptlets are checked and the account one run on the target system).
#[test]
fn the_rpms_carry_what_a_rhel_site_needs_and_erase_cleanly() {
    let out = std::env::temp_dir().join(format!("cinch-rpms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let target = Target::from_env();
    let built = target.make_packages("make-rpms", &out);
    let rpms: Vec<PathBuf> = built.lines().map(PathBuf::from).collect();
    assert_eq!(rpms.len(), 3, "three packages: {built}");
    let query = |file: &Path, args: &[&str]| {
        run_ok(
            Command::new("rpm")
                .args(["-qp", "--nosignature"])
                .args(args)
                .arg(file),
        )
    };
    let rpm = |name: &str| {
        rpms.iter()
            .find(|r| query(r, &["--qf", "%{NAME}"]) == name)
            .unwrap_or_else(|| panic!("no {name} RPM in {built}"))
            .clone()
    };
    let slurmctld = run_ok(
        target
            .command("dpkg-query")
            .args(["-W", "-f=${Version}", "slurmctld"]),
    );
    let upstream = slurmctld.split('-').next().unwrap().to_string();
    let (major, minor) = upstream.split_once('.').unwrap();
    let minor: u32 = minor.split('.').next().unwrap().parse().unwrap();
    let requires = query(&rpm("cinch-job-submit"), &["--requires"]);
    assert!(
        requires.contains(&format!("slurm-slurmctld = {upstream}\n")),
        "the plugin loads only into the slurmctld it was built for: {requires}"
    );
    let requires = query(&rpm("cinch-spank"), &["--requires"]);
    for bound in [
        format!("slurm >= {major}.{minor:02}"),
        format!("slurm < {major}.{:02}", minor + 1),
    ] {
        assert!(requires.contains(&bound), "{bound} in {requires}");
    }
    for (package, files) in [
        (
            "cinch-job-submit",
            &[
                "/usr/lib64/slurm/job_submit_cinch.so",
                "/usr/share/doc/cinch-job-submit/examples/cinch.conf",
                "/usr/share/licenses/cinch-job-submit-0.1.0/LICENSE",
            ][..],
        ),
        (
            "cinch-spank",
            &[
                "/usr/lib64/slurm/spank_cinch.so",
                "/etc/slurm/plugstack.conf.d/cinch.conf",
                "/usr/lib/cinch/cinch-mps-prolog",
                "/usr/lib/cinch/cinch-task-prolog",
                "/usr/bin/cinch-watch",
            ][..],
        ),
        (
            "cinch",
            &[
                "/usr/bin/cinch",
                "/usr/lib/systemd/system/cinch.service",
                "/etc/cinch/cinch-serve.toml",
                "/usr/share/doc/cinch/users.md",
                "/usr/share/doc/cinch/policies/qos.md",
                "/usr/share/doc/cinch/openapi.json",
                "/var/lib/cinch",
            ][..],
        ),
    ] {
        let listing = query(&rpm(package), &["--list"]);
        for file in files {
            assert!(
                listing.lines().any(|l| l == *file),
                "{file} in {package}: {listing}"
            );
        }
    }
    let config = query(&rpm("cinch"), &["--configfiles"]);
    assert_eq!(config.trim(), "/etc/cinch/cinch-serve.toml");
    // The scriptlets: the account, the service stopped before its binary goes; all valid sh.
    let cinch = rpm("cinch");
    let script = |tag: &str| query(&cinch, &["--qf", &format!("%{{{tag}}}")]);
    let pre = script("PREIN");
    assert!(
        pre.contains("useradd -r -g cinch -d /var/lib/cinch"),
        "{pre}"
    );
    assert!(script("PREUN").contains("systemctl stop cinch.service"));
    for tag in ["PREIN", "POSTIN", "PREUN", "POSTUN"] {
        run_ok(Command::new("sh").args(["-n", "-c", &script(tag)]));
    }
    run_ok(target.command("sh").args(["-c", &pre]));
    let user = run_ok(target.command("getent").args(["passwd", "cinch"]));
    assert!(user.starts_with("cinch:"), "{user}");

    // Installed into a scratch root, then erased: only the admin's edited settings stay.
    let root = out.join("root");
    let in_root = |args: &[&str]| {
        run_ok(
            Command::new("rpm")
                .arg("--root")
                .arg(&root)
                .args(["--dbpath", "/var/lib/rpm", "--nosignature"])
                .args(args),
        )
    };
    std::fs::create_dir_all(&root).unwrap();
    in_root(&["--initdb"]);
    let mut install = vec!["-i", "--nodeps", "--noscripts"];
    install.extend(rpms.iter().map(|r| r.to_str().unwrap()));
    in_root(&install);
    let unit = std::fs::read_to_string(root.join("usr/lib/systemd/system/cinch.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/bin/cinch serve --config /etc/cinch/cinch-serve.toml"),
        "{unit}"
    );
    let plugstack =
        std::fs::read_to_string(root.join("etc/slurm/plugstack.conf.d/cinch.conf")).unwrap();
    assert_eq!(plugstack.trim(), "optional /usr/lib64/slurm/spank_cinch.so");
    let settings = root.join("etc/cinch/cinch-serve.toml");
    let mut edited = std::fs::read_to_string(&settings).unwrap();
    edited.push_str("\n# the admin's own line\n");
    std::fs::write(&settings, edited).unwrap();
    in_root(&[
        "-e",
        "--nodeps",
        "--noscripts",
        "cinch",
        "cinch-spank",
        "cinch-job-submit",
    ]);
    let left = run_ok(Command::new("find").arg(&root).args([
        "-type",
        "f",
        "-not",
        "-path",
        "*/var/lib/rpm/*",
    ]));
    let left: Vec<&str> = left.lines().collect();
    assert_eq!(
        left,
        [root
            .join("etc/cinch/cinch-serve.toml.rpmsave")
            .to_str()
            .unwrap()],
        "erasing leaves only the edited settings, saved"
    );

    // The source tarball a site builds them from (rpmbuild -ta) carries the spec and the lock.
    let tarball = run_ok(
        Command::new(repo_root().join("slurm-conf/make-rpms"))
            .args(["--source", "--out"])
            .arg(&out),
    );
    let contents = run_ok(Command::new("tar").arg("tzf").arg(tarball.trim()));
    for file in [
        "cinch-0.1.0/slurm-conf/cinch.spec",
        "cinch-0.1.0/Cargo.lock",
    ] {
        assert!(contents.lines().any(|l| l == file), "{file} in the tarball");
    }
    let _ = std::fs::remove_dir_all(&out);
}
