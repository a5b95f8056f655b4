//! Harness for cinch's end-to-end tests: a real local Slurm cluster (slurm-conf/local-cluster)
//! with the cinch plugin loaded, real `sbatch` submissions, and what Slurm reports back.
//!
//! At most two clusters run at once across test threads *and* processes, each holding one of two
//! file locks (a cluster idles at 4-7% of the 2 cores, docs/benchmarks.md, so a second beside it
//! leaves the timings alone; more would crowd the tests that time Slurm). Clusters are always torn
//! down on drop, so a failing assertion still stops every daemon. A failed test keeps its scratch
//! directory (the path is printed) so the slurmctld log can be read.

pub mod fake_optimizer;
pub mod golden_reasons;

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The repository root (this crate lives in `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Panics with an explanation when this machine cannot run a real cluster: these tests never
/// pretend to pass without Slurm.
fn require_prerequisites() {
    let missing: Vec<&str> = ["slurmctld", "slurmd", "sbatch", "munged", "nm"]
        .into_iter()
        .filter(|tool| {
            !Command::new("sh")
                .args([
                    "-c",
                    &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
                ])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "end-to-end tests need a real Slurm; missing: {missing:?}. Run tests/run, which installs \
         slurmctld, slurmd, slurm-client and munge (Debian 12) and then runs every test."
    );
    let uid = run_ok(Command::new("id").arg("-u"));
    assert_eq!(
        uid.trim(),
        "0",
        "end-to-end tests must run as root: slurmd launches jobs as their users"
    );
}

fn run(command: &mut Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"))
}

/// Runs a command that must succeed; returns its stdout.
pub fn run_ok(command: &mut Command) -> String {
    let out = run(command);
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the tests run: the plugin cdylib and the `cinch` binary, built once per test process.
/// `CINCH_PLUGIN` and `CINCH_SPANK` name plugins built for another Slurm release instead (tests/run
/// runs the end-to-end tests again that way on Slurm 26.05 and 24.11, with `CINCH_SLURM_ROOT` set).
pub struct Artifacts {
    pub plugin: PathBuf,
    pub spank: PathBuf,
    pub cinch: PathBuf,
    /// The job watcher, `cinch-watch`.
    pub watch: PathBuf,
}

pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Built as `slurm-conf/make-debs --debug` builds them, the plugins together and the
        // optimizer on its own (cargo unifies features over what one command builds): the
        // package test then finds them built.
        let build = |packages: &[&str]| {
            let mut command = Command::new(&cargo);
            command
                .current_dir(repo_root())
                .args(["build", "--quiet", "--message-format=json"]);
            for package in packages {
                command.args(["-p", package]);
            }
            run_ok(&mut command)
        };
        let out = build(&["cinch-plugin", "cinch-spank"])
            + &build(&["cinch-optimizer"])
            + &build(&["cinch-watch"]);
        // Compiler-artifact messages name the files; no JSON parser needed for a plain path.
        let field = |line: &str, key: &str| -> Option<String> {
            let start = line.find(key)? + key.len();
            Some(line[start..start + line[start..].find('"')?].to_string())
        };
        let mut plugin = None;
        let mut spank = None;
        let mut cinch = None;
        let mut watch = None;
        for line in out.lines().filter(|l| l.contains("\"compiler-artifact\"")) {
            if let Some(path) = field(line, "\"filenames\":[\"") {
                if path.ends_with("libjob_submit_cinch.so") {
                    plugin = Some(PathBuf::from(path));
                } else if path.ends_with("libspank_cinch.so") {
                    spank = Some(PathBuf::from(path));
                }
            }
            if let Some(path) = field(line, "\"executable\":\"") {
                if path.ends_with("/cinch") {
                    cinch = Some(PathBuf::from(path));
                } else if path.ends_with("/cinch-watch") {
                    watch = Some(PathBuf::from(path));
                }
            }
        }
        Artifacts {
            plugin: std::env::var_os("CINCH_PLUGIN")
                .map(PathBuf::from)
                .or(plugin)
                .expect("cargo build reported no libjob_submit_cinch.so"),
            spank: std::env::var_os("CINCH_SPANK")
                .map(PathBuf::from)
                .or(spank)
                .expect("cargo build reported no libspank_cinch.so"),
            cinch: cinch.expect("cargo build reported no cinch binary"),
            watch: watch.expect("cargo build reported no cinch-watch binary"),
        }
    })
}

/// `tests/probe/tls_dtor_probe.c` built as a preloadable library (once per test process): it
/// records every thread-local destructor of job_submit_cinch.so registered on slurmctld's main
/// thread into the file named by `CINCH_TLS_PROBE`.
pub fn tls_probe() -> &'static Path {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| {
        // One file for every test process, each build renamed into place whole (a slurmctld
        // that loaded an earlier one keeps it), so runs leave one behind, not one each.
        let out = std::env::temp_dir().join("cinch-e2e/tls_dtor_probe.so");
        let built = out.with_extension(format!("so.{}", std::process::id()));
        fs::create_dir_all(out.parent().expect("has a parent")).expect("create cinch-e2e");
        run_ok(
            Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
                .arg(&built)
                .arg(repo_root().join("tests/probe/tls_dtor_probe.c"))
                .arg("-ldl"),
        );
        fs::rename(&built, &out).expect("rename the TLS probe into place");
        out
    })
}

/// The plugin cdylib the tests load into slurmctld.
pub fn plugin_path() -> &'static Path {
    &artifacts().plugin
}

/// What cinch.conf the cluster gets.
#[derive(Debug, Clone)]
pub enum CinchConf {
    /// local-cluster's default (Mode=shadow, LogLevel=verbose).
    Default,
    /// No cinch.conf at all: the plugin runs on its built-in defaults.
    Missing,
    /// This exact text.
    Text(String),
}

#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// gres/shard per node, spread over its GPUs (0: none).
    pub shards_per_node: u32,
    /// With shards: only the last this many nodes offer them, in partition `shared`.
    pub share_nodes: u32,
    /// What the sharing nodes offer: `shards` (gres/shard) or `mps` (gres/mps units, with
    /// cinch's MPS Prolog and TaskProlog; `local-cluster --share-mode`).
    pub share_mode: &'static str,
    /// Lines added to the end of cinch.conf (e.g. sharing settings beside the generated ones).
    pub cinch_conf_append: Option<String>,
    /// The job_submit plugin, SPANK plugin and cinch binary to run instead of this build's
    /// (e.g. the ones a package installed).
    pub installed: Option<[PathBuf; 3]>,
    pub racks: u32,
    /// `block`: the racks are blocks of topology/block (Slurm 23.11+); `yaml`: they are blocks
    /// of a named topology in topology.yaml that partition gpu names (25.05+); `tree` otherwise.
    pub topology: &'static str,
    pub cinch_conf: CinchConf,
    /// Also run the real `cinch serve` (enforce mode) wired to the plugin.
    pub optimizer: bool,
    /// ... with the plugin reaching it over TLS (`--optimizer-tls`).
    pub optimizer_tls: bool,
    /// ... learning run times at start from this `sacct -P` export (`--optimizer-history`).
    pub optimizer_history: Option<String>,
    /// Run slurmctld with the thread-destructor probe ([`tls_probe`]) preloaded.
    pub tls_probe: bool,
    /// Run slurmdbd on MariaDB with multifactor fair share (`local-cluster --accounting`): users
    /// root, nobody and daemon in account `research`.
    pub accounting: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            nodes: 4,
            gpus_per_node: 8,
            shards_per_node: 0,
            share_nodes: 0,
            share_mode: "shards",
            cinch_conf_append: None,
            installed: None,
            racks: 2,
            topology: "tree",
            cinch_conf: CinchConf::Default,
            optimizer: false,
            optimizer_tls: false,
            optimizer_history: None,
            tls_probe: false,
            accounting: false,
        }
    }
}

/// A running local cluster; dropped = torn down.
pub struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    scripts: AtomicU32,
    _serial: File,
}

/// For a test that starts its own local cluster (e.g. through `cinch replay`, on local-cluster's
/// own ports): checks that this machine can run one and holds every cluster slot, until dropped,
/// so no other cluster of the tests runs beside it.
pub fn exclusive_cluster_slot() -> Vec<File> {
    require_prerequisites();
    every_cluster_slot()
}

/// Polls `poll` every 200 ms until it gives a value; once `timeout` has passed, panics with
/// `failure()` (built only then, so it can say what the state was at the end).
pub fn wait_until<T>(
    timeout: Duration,
    mut poll: impl FnMut() -> Option<T>,
    failure: impl FnOnce() -> String,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = poll() {
            return value;
        }
        if start.elapsed() >= timeout {
            panic!("{} (waited {timeout:?})", failure());
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// The Slurm release the tests run against, as (major, minor): the one in `CINCH_SLURM_ROOT`
/// (its VERSION file, written by slurm-conf/slurm-root), else the host's installed slurmctld
/// (Slurm's own `-V` wants a configuration first).
pub fn slurm_version() -> (u32, u32) {
    let version = match std::env::var_os("CINCH_SLURM_ROOT") {
        Some(root) => fs::read_to_string(Path::new(&root).join("VERSION"))
            .expect("the Slurm root's VERSION file"),
        None => run_ok(Command::new("dpkg-query").args(["-W", "-f=${Version}", "slurmctld"])),
    };
    let version = version.trim();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// How many of the tests' clusters run at once on this machine.
const CLUSTER_SLOTS: u32 = 2;

/// Slot `slot`'s lock file, shared by every test process on this machine.
fn cluster_slot_file(slot: u32) -> File {
    let path = std::env::temp_dir().join(format!("cinch-e2e.lock.{slot}"));
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()))
}

/// The first free cluster slot (its number and its lock), waiting while every slot is taken.
fn a_cluster_slot() -> (u32, File) {
    loop {
        for slot in 0..CLUSTER_SLOTS {
            let file = cluster_slot_file(slot);
            match file.try_lock() {
                Ok(()) => return (slot, file),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => panic!("cannot lock slot {slot}: {e}"),
            }
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// Every cluster slot, taken in order (so two takers cannot each hold one the other waits for).
fn every_cluster_slot() -> Vec<File> {
    (0..CLUSTER_SLOTS)
        .map(|slot| {
            let file = cluster_slot_file(slot);
            file.lock()
                .unwrap_or_else(|e| panic!("cannot lock slot {slot}: {e}"));
            file
        })
        .collect()
}

impl Cluster {
    pub fn up(spec: ClusterSpec) -> Cluster {
        require_prerequisites();
        let [plugin, spank, cinch] = spec.installed.clone().unwrap_or_else(|| {
            [
                plugin_path().to_path_buf(),
                artifacts().spank.clone(),
                artifacts().cinch.clone(),
            ]
        });
        let (slot, serial) = a_cluster_slot();

        static COUNT: AtomicU32 = AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::Relaxed);
        // Each cluster slot has ports of its own, so clusters side by side never share one; within
        // a slot they move on from cluster to cluster, away from a port the last left in TIME_WAIT.
        // Away from local-cluster's defaults (16817+, 17001+), which a developer's own cluster
        // uses, and below the kernel's ephemeral ports (32768+): slurmctld takes 5 (itself, the
        // optimizer, MariaDB and slurmdbd at +1, +3 and +4), each slurmd one from the node base.
        let ports = slot * 50 + (std::process::id() + n) % 50;
        let ctld_port = 21_000 + ports * 5;
        let dir = std::env::temp_dir().join(format!("cinch-e2e/{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the cluster's scratch directory");

        let conf_arg = match &spec.cinch_conf {
            CinchConf::Default => None,
            CinchConf::Missing => Some("none".to_string()),
            CinchConf::Text(text) => {
                let path = dir.join("cinch.conf.in");
                fs::write(&path, text).expect("write cinch.conf");
                Some(path.display().to_string())
            }
        };
        let mut command = Command::new(repo_root().join("slurm-conf/local-cluster"));
        command
            .arg("up")
            .arg("--dir")
            .arg(&dir)
            .args(["--nodes", &spec.nodes.to_string()])
            .args(["--gpus", &spec.gpus_per_node.to_string()])
            .args(["--shards", &spec.shards_per_node.to_string()])
            .args(["--share-nodes", &spec.share_nodes.to_string()])
            .args(["--share-mode", spec.share_mode])
            .args(["--racks", &spec.racks.to_string()])
            .args(["--topology", spec.topology])
            .args(["--ctld-port", &ctld_port.to_string()])
            .args(["--node-port-base", &(22_000 + ports * 100).to_string()])
            .arg("--plugin")
            .arg(&plugin)
            .arg("--spank")
            .arg(&spank)
            .arg("--cinch")
            .arg(&cinch);
        if spec.optimizer_tls {
            command.arg("--optimizer-tls");
        } else if spec.optimizer {
            command.arg("--optimizer");
        }
        if let Some(history) = &spec.optimizer_history {
            let path = dir.join("optimizer-history.txt");
            fs::write(&path, history).expect("write the history to import");
            command.arg("--optimizer-history").arg(&path);
        }
        if spec.accounting {
            command.arg("--accounting");
        }
        if let Some(conf) = conf_arg {
            command.args(["--cinch-conf", &conf]);
        }
        if let Some(lines) = &spec.cinch_conf_append {
            let path = dir.join("cinch.conf.append");
            fs::write(&path, lines).expect("write the cinch.conf lines to append");
            command.arg("--cinch-conf-append").arg(&path);
        }
        if spec.tls_probe {
            command.args([
                "--ctld-env",
                &format!("LD_PRELOAD={}", tls_probe().display()),
                "--ctld-env",
                &format!(
                    "CINCH_TLS_PROBE={}",
                    dir.join("log/tls-probe.txt").display()
                ),
            ]);
        }
        let cluster = Cluster {
            conf: dir.join("etc/slurm.conf"),

            dir,
            scripts: AtomicU32::new(0),
            _serial: serial,
        };
        // From here on, Drop tears down whatever `up` managed to start.
        run_ok(&mut command);
        cluster
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the thread-destructor probe recorded (empty: nothing), with `tls_probe` set.
    pub fn tls_probe_report(&self) -> String {
        fs::read_to_string(self.dir.join("log/tls-probe.txt")).unwrap_or_default()
    }

    /// A Slurm client command pointed at this cluster.
    pub fn slurm(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// Submits `script` (a shell script body) with `args`; returns the job id.
    pub fn sbatch(&self, args: &[&str], script: &str) -> u32 {
        self.try_sbatch(args, script)
            .unwrap_or_else(|stderr| panic!("sbatch {args:?} failed: {stderr}"))
    }

    /// Like [`Cluster::sbatch`], returning sbatch's stderr when it refuses.
    pub fn try_sbatch(&self, args: &[&str], script: &str) -> Result<u32, String> {
        self.sbatch_told(args, script).map(|(id, _)| id)
    }

    /// Like [`Cluster::try_sbatch`], with what sbatch told the user (its stderr) on success too.
    pub fn sbatch_told(&self, args: &[&str], script: &str) -> Result<(u32, String), String> {
        let jobs = self.dir.join("jobs");
        fs::create_dir_all(&jobs).expect("create jobs dir");
        let n = self.scripts.fetch_add(1, Ordering::Relaxed);
        let path = jobs.join(format!("script-{n}.sh"));
        fs::write(&path, format!("#!/bin/bash\n{script}\n")).expect("write job script");
        let output = format!("{}/%j.out", jobs.display());
        let out = run(self
            .slurm("sbatch")
            .args(["--parsable", "--output", &output])
            .args(args)
            .arg(&path));
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let id = stdout.trim().split(';').next().unwrap_or("");
        let id = id
            .parse()
            .unwrap_or_else(|_| panic!("sbatch printed no job id: {stdout:?}"));
        Ok((id, String::from_utf8_lossy(&out.stderr).into_owned()))
    }

    /// Submits `script` as the unprivileged `user` (through runuser, as that user's own sbatch
    /// would), writing its output under a directory anyone may write; returns the job id.
    pub fn sbatch_as(&self, user: &str, args: &[&str], script: &str) -> u32 {
        let jobs = self.dir.join("user-jobs");
        fs::create_dir_all(&jobs).expect("create user-jobs dir");
        run_ok(Command::new("chmod").arg("1777").arg(&jobs));
        let n = self.scripts.fetch_add(1, Ordering::Relaxed);
        let path = jobs.join(format!("script-{n}.sh"));
        fs::write(&path, format!("#!/bin/bash\n{script}\n")).expect("write job script");
        let output = format!("{}/%j.out", jobs.display());
        // From a directory the user may enter: a checkout can sit in one only root may.
        let stdout = run_ok(
            Command::new("runuser")
                .current_dir("/tmp")
                .args(["-u", user, "--", "env"])
                .arg(format!("SLURM_CONF={}", self.conf.display()))
                .args([
                    "sbatch",
                    "--parsable",
                    "--chdir",
                    "/tmp",
                    "--output",
                    &output,
                ])
                .args(args)
                .arg(&path),
        );
        let id = stdout.trim().split(';').next().unwrap_or("");
        id.parse()
            .unwrap_or_else(|_| panic!("sbatch printed no job id: {stdout:?}"))
    }

    /// A copy of `binary` every user may run: a checkout can sit in a directory only root may
    /// enter.
    pub fn user_binary(&self, binary: &Path) -> PathBuf {
        let bin = self.dir.join("user-bin");
        fs::create_dir_all(&bin).expect("create user-bin");
        let copy = bin.join(binary.file_name().expect("a binary has a name"));
        if !copy.exists() {
            fs::copy(binary, &copy).expect("copy the binary");
        }
        run_ok(Command::new("chmod").arg("-R").arg("a+rx").arg(&bin));
        copy
    }

    /// The optimizer's URL, as `local-cluster up` exported it (DIR/env).
    pub fn optimizer_url(&self) -> Option<String> {
        let env = fs::read_to_string(self.dir.join("env")).ok()?;
        env.lines()
            .find_map(|l| l.strip_prefix("export CINCH_URL="))
            .map(str::to_string)
    }

    /// `cinch why ARGS` run as the unprivileged `user` (a copy of the binary they may run), with
    /// the environment `local-cluster up` printed (DIR/env) as the user's shell would have it:
    /// what it printed, or its stderr on failure.
    pub fn cinch_why_as(&self, user: &str, args: &[&str]) -> Result<String, String> {
        let cinch = self.user_binary(&artifacts().cinch);
        let env =
            fs::read_to_string(self.dir.join("env")).expect("local-cluster up writes DIR/env");
        let exported = env
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .map(str::to_string);
        let out = run(Command::new("runuser")
            .current_dir("/tmp")
            .args(["-u", user, "--", "env"])
            .args(exported)
            .arg(format!("SLURM_CONF={}", self.conf.display()))
            .arg(&cinch)
            .arg("why")
            .args(args));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// What a job submitted with [`Cluster::sbatch_as`] wrote.
    pub fn user_job_output(&self, id: u32) -> String {
        fs::read_to_string(self.dir.join(format!("user-jobs/{id}.out"))).unwrap_or_default()
    }

    /// `scontrol show job` as key -> value.
    pub fn job(&self, id: u32) -> Job {
        Job::parse(&run_ok(self.slurm("scontrol").args([
            "show",
            "job",
            &id.to_string(),
        ])))
    }

    /// Waits until the job reaches one of the end states; panics on timeout.
    pub fn wait_done(&self, id: u32, timeout: Duration) -> Job {
        self.wait_for_job(id, timeout, "done", |job| {
            matches!(
                job.get("JobState"),
                "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY"
            )
        })
    }

    /// What the job wrote to its output file.
    pub fn job_output(&self, id: u32) -> String {
        fs::read_to_string(self.dir.join(format!("jobs/{id}.out"))).unwrap_or_default()
    }

    pub fn slurmctld_log(&self) -> String {
        fs::read_to_string(self.dir.join("log/slurmctld.log")).unwrap_or_default()
    }

    /// The slurmctld PID that `up` started, if it is still running.
    pub fn slurmctld_pid(&self) -> Option<u32> {
        let pid = self.recorded_pid("slurmctld")?;
        Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
    }

    /// Gives the plugin this optimizer token (beside cinch.conf, mode 0600).
    pub fn write_optimizer_token(&self, token: &str) {
        let path = self.dir.join("etc/cinch-optimizer.token");
        fs::write(&path, format!("{token}\n")).expect("write token");
        run_ok(Command::new("chmod").arg("600").arg(&path));
    }

    /// `cinch policy ARGS` against the cluster's real optimizer.
    /// Runs `cinch policy ARGS` as an admin of this cluster would: with the environment that
    /// `local-cluster up` printed (DIR/env: CINCH_URL, CINCH_STATE_DIR) and nothing else.
    pub fn cinch_policy(&self, args: &[&str]) -> String {
        let mut all = vec!["policy"];
        all.extend_from_slice(args);
        self.cinch_admin(&all)
    }

    /// `cinch ARGS` as the admin on the optimizer's host: with the environment `local-cluster
    /// up` prints (CINCH_URL, CINCH_STATE_DIR, where the admin token is).
    pub fn cinch_admin(&self, args: &[&str]) -> String {
        let mut command = Command::new(&artifacts().cinch);
        command.args(args).env("SLURM_CONF", &self.conf);
        let env =
            fs::read_to_string(self.dir.join("env")).expect("local-cluster up writes DIR/env");
        let mut found = Vec::new();
        for line in env.lines() {
            if let Some((key, value)) = line.strip_prefix("export ").and_then(|l| l.split_once('='))
            {
                command.env(key, value);
                found.push(key.to_string());
            }
        }
        for key in ["CINCH_URL", "CINCH_STATE_DIR"] {
            assert!(found.iter().any(|k| k == key), "{key} not in {env}");
        }
        run_ok(
            command
                .env_remove("CINCH_CONFIG")
                .env_remove("CINCH_ADMIN_TOKEN_FILE"),
        )
    }

    /// The optimizer's `/metrics` (clusters started with `optimizer`), over its Unix socket.
    pub fn optimizer_metrics(&self) -> String {
        run_ok(
            Command::new("curl")
                .args(["-sf", "--unix-socket"])
                .arg(self.dir.join("run/optimizer.sock"))
                .arg("http://localhost/metrics"),
        )
    }

    fn recorded_pid(&self, name: &str) -> Option<u32> {
        let pids = fs::read_to_string(self.dir.join("run/pids")).ok()?;
        pids.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILLs the real optimizer, as a crash would.
    pub fn kill_optimizer(&self) {
        let pid = self
            .recorded_pid("optimizer")
            .expect("the cluster runs an optimizer");
        run_ok(Command::new("kill").args(["-KILL", &pid.to_string()]));
    }

    /// Restarts slurmctld with its saved state and waits until every node registered again.
    pub fn restart_slurmctld(&self) {
        run_ok(
            Command::new(repo_root().join("slurm-conf/local-cluster"))
                .arg("restart-slurmctld")
                .arg("--dir")
                .arg(&self.dir),
        );
    }

    /// Restarts slurmctld, failing with `context` if it did not exit with status 0 on SIGTERM,
    /// left a core file, or did not come back; does not wait for the nodes to register (the
    /// exit test stops it 50 times and needs only the controller).
    pub fn restart_slurmctld_checked(&self, context: &str) {
        let out = run(Command::new(repo_root().join("slurm-conf/local-cluster"))
            .arg("restart-slurmctld")
            .arg("--no-wait-nodes")
            .arg("--dir")
            .arg(&self.dir));
        assert!(
            out.status.success(),
            "{context}: {}
--- slurmctld.log (cinch) ---
{}",
            String::from_utf8_lossy(&out.stderr),
            self.cinch_log_tail(20)
        );
    }

    /// Waits until `check` holds for the job (polling `scontrol show job`); panics on timeout.
    pub fn wait_for_job(
        &self,
        id: u32,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Job) -> bool,
    ) -> Job {
        wait_until(
            timeout,
            || Some(self.job(id)).filter(&check),
            || {
                format!(
                    "job {id}: not {what}: {:?}\n--- slurmctld.log (cinch) ---\n{}",
                    self.job(id),
                    self.cinch_log_tail(40)
                )
            },
        )
    }

    /// Waits until slurmctld.log holds `text` at least `times` times; panics on timeout.
    pub fn wait_for_log(&self, text: &str, times: usize, timeout: Duration) {
        wait_until(
            timeout,
            || (self.slurmctld_log().matches(text).count() >= times).then_some(()),
            || {
                format!(
                    "slurmctld.log: {text:?} not there {times} time(s)\n--- slurmctld.log (cinch) ---\n{}",
                    self.cinch_log_tail(30)
                )
            },
        )
    }

    /// The last `n` lines slurmctld.log has about cinch.
    pub fn cinch_log_tail(&self, n: usize) -> String {
        let log = self.slurmctld_log();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("cinch")).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// slurmctld answers RPCs.
    pub fn slurmctld_responds(&self) -> bool {
        run(self.slurm("scontrol").arg("ping")).status.success()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let out = Command::new(repo_root().join("slurm-conf/local-cluster"))
            .arg("down")
            .arg("--dir")
            .arg(&self.dir)
            .output();
        let stopped = out.as_ref().is_ok_and(|o| o.status.success());
        if thread::panicking() || !stopped {
            eprintln!(
                "cluster scratch directory kept for inspection: {}",
                self.dir.display()
            );
            if let Ok(o) = &out {
                eprintln!("{}", String::from_utf8_lossy(&o.stderr));
            }
            if !stopped && !thread::panicking() {
                panic!("local-cluster down failed for {}", self.dir.display());
            }
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// One job as `scontrol show job` prints it (read as `cinch why` and `cinch replay` read it).
#[derive(Debug, Clone)]
pub struct Job(BTreeMap<String, String>);

impl Job {
    /// The job as `scontrol show job` shows it. Every reason cinch wrote into its AdminComment
    /// is checked on the way: it reads right (cinch_core::util::words::reason_problems) and in
    /// the golden words ([`golden_reasons`]), so every live test's jobs are golden tests of the
    /// reasons users read.
    pub fn parse(text: &str) -> Job {
        let job = Job(cinch_core::slurm::scontrol::parse_show_job(text));
        for segment in job.get("AdminComment").split(" | ") {
            let Some((_, why)) = segment.split_once(" why=") else {
                continue;
            };
            let problems = cinch_core::util::words::reason_problems(why);
            assert!(
                problems.is_empty(),
                "job {}: cinch's reason reads wrong ({}): {why}",
                job.get("JobId"),
                problems.join("; ")
            );
            let unknown = golden_reasons::unknown_fragments(why);
            assert!(
                unknown.is_empty(),
                "job {}: cinch's reason has words no golden reason has ({}; templates: {unknown:?}): \
                 {why}\nevery clause's words are in optimizer/core/tests/golden/ (a new one goes \
                 there first: golden_reasons.rs in cinch-core)",
                job.get("JobId"),
                unknown.len()
            );
        }
        job
    }

    /// The field's value, "" when absent.
    pub fn get(&self, key: &str) -> &str {
        self.0.get(key).map_or("", String::as_str)
    }

    /// A TRES field (`TresPerNode`, `TresPerJob`) in 22.05's spelling: Slurm 23.11 and later
    /// print `gres/gpu:1` where 22.05 prints `gres:gpu:1`.
    pub fn tres(&self, key: &str) -> String {
        self.get(key).replace("gres/", "gres:")
    }
}

/// The `key=value` pairs of cinch's AdminComment record (`cinch: gpus=8 gpu_spec=...`), read
/// here without cinch_core's own reader, so the tests check the format the plugin writes.
pub fn cinch_record(admin_comment: &str) -> HashMap<String, String> {
    let record = admin_comment
        .split(" | ")
        .find(|segment| segment.starts_with("cinch:"))
        .unwrap_or("");
    record
        .trim_start_matches("cinch:")
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_cinch_record_out_of_an_admin_comment() {
        let record = cinch_record("ticket 9 | cinch: gpus=8 gpu_spec=per_job:8 nodes=2");
        assert_eq!(record["gpus"], "8");
        assert_eq!(record["gpu_spec"], "per_job:8");
        assert_eq!(record["nodes"], "2");
        assert!(cinch_record("no record here").is_empty());
    }
}
