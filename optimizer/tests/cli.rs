//! The real `cinch` binary: `cinch serve` with no arguments (settings from the environment only,
//! to keep the test's state out of /var/lib), the `cinch policy` CLI against it over a socket,
//! and a graceful exit on SIGTERM.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CINCH: &str = env!("CARGO_BIN_EXE_cinch");

/// A TCP port the kernel says is free right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    dir: PathBuf,
    url: String,
    /// The CA of its TLS certificate, when it serves TLS.
    ca: Option<PathBuf>,
}

/// A CA and a server certificate for localhost / 127.0.0.1 in `dir`, by slurm-conf/make-tls-cert.
fn make_certificates(dir: &Path) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../slurm-conf/make-tls-cert");
    let out = Command::new(script)
        .arg(dir)
        .args(["localhost", "127.0.0.1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

impl Server {
    fn start(name: &str) -> Server {
        Server::start_with(name, false)
    }

    fn start_with(name: &str, tls: bool) -> Server {
        Server::start_prepared(name, tls, |_| {})
    }

    /// [`Server::start_with`], `prepare` first given its state directory (created, 0700).
    fn start_prepared(name: &str, tls: bool, prepare: impl FnOnce(&Path)) -> Server {
        let dir = std::env::temp_dir().join(format!("cinch-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir.join("state"))
                .unwrap();
        }
        prepare(&dir.join("state"));
        let port = free_port();
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let mut command = Command::new(CINCH);
        command
            .arg("serve")
            .env("CINCH_STATE_DIR", dir.join("state"))
            .env("CINCH_LISTEN", format!("127.0.0.1:{port}"))
            .env("CINCH_LISTEN_UNIX", dir.join("serve.sock"))
            .stdout(Stdio::null())
            .stderr(log);
        if tls {
            make_certificates(&dir.join("tls"));
            command
                .env("CINCH_TLS_CERT_FILE", dir.join("tls/server.pem"))
                .env("CINCH_TLS_KEY_FILE", dir.join("tls/server.key"));
        }
        let child = command.spawn().unwrap();
        let server = Server {
            child,
            url: if tls {
                format!("https://localhost:{port}")
            } else {
                format!("http://127.0.0.1:{port}")
            },
            ca: tls.then(|| dir.join("tls/ca.pem")),
            dir,
        };
        let start = Instant::now();
        while !server.policy(&["show"]).status.success() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "cinch serve did not come up: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn policy(&self, args: &[&str]) -> Output {
        let mut command = Command::new(CINCH);
        command
            .arg("policy")
            .args(["--url", &self.url])
            .env("CINCH_STATE_DIR", self.dir.join("state"));
        if let Some(ca) = &self.ca {
            command.arg("--ca-file").arg(ca);
        }
        command.args(args).output().unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("serve.log")).unwrap_or_default()
    }

    fn state(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn serve_starts_without_arguments_and_the_cli_drives_it() {
    let mut server = Server::start("drive");
    let show = server.policy(&["show"]);
    assert!(
        stdout(&show).starts_with("version 1, changed ") && stdout(&show).contains("policy: cinch"),
        "{}",
        stdout(&show)
    );
    // Which of users' --cinch-* options count under these settings.
    assert!(
        stdout(&show).contains(
            "--cinch-due, --cinch-turnaround, --cinch-start-within: do not count \
             (user_targets=false; Slurm's --deadline does)"
        ) && stdout(&show)
            .contains("--cinch-ckpt, --cinch-elastic: with --requeue, cinch may requeue"),
        "{}",
        stdout(&show)
    );
    let json = server.policy(&["show", "--output", "json"]);
    assert!(
        stdout(&json).contains("\"version\": 1"),
        "{}",
        stdout(&json)
    );

    let set = server.policy(&["set", "mode=enforce", "ttl_s=120", "user_targets=true"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert!(
        stdout(&set).contains("--cinch-start-within: count for every user"),
        "{}",
        stdout(&set)
    );
    assert!(
        stdout(&set).contains("  ttl_s = 120   (default 300)"),
        "{}",
        stdout(&set)
    );
    let decisions = Command::new(CINCH)
        .args(["decisions", "--url", &server.url])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .output()
        .unwrap();
    assert!(decisions.status.success(), "{}", stderr(&decisions));
    assert!(
        stdout(&decisions).starts_with("time ") && stdout(&decisions).lines().count() == 1,
        "no decisions yet: {}",
        stdout(&decisions)
    );

    let refused = server.policy(&["set", "ttl_s=0"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("ttl_s must be from 1 to 86400"),
        "{}",
        stderr(&refused)
    );

    let history = server.policy(&["history"]);
    let text = stdout(&history);
    assert_eq!(text.lines().count(), 3, "header + 2 versions:\n{text}");
    assert!(
        text.contains("enforce") && text.contains("PATCH /v1/policy: mode, policy"),
        "{text}"
    );

    let wrong = Command::new(CINCH)
        .args(["policy", "--url", &server.url, "--token-file"])
        .arg(server.state().join("state/plugin.token"))
        .arg("show")
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    let plugin_token = server.state().join("state/plugin.token");
    assert!(
        stderr(&wrong).contains("401")
            && stderr(&wrong).contains(&format!(
                "refused the admin token read from {}",
                plugin_token.display()
            )),
        "{}",
        stderr(&wrong)
    );
    // Without the token (as a user who cannot read it): an admin command, and what to do.
    let missing = server.state().join("state/no-such.token");
    let unreadable = Command::new(CINCH)
        .args(["decisions", "--url", &server.url, "--token-file"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!unreadable.status.success());
    assert!(
        stderr(&unreadable).contains(&format!(
            "this is an admin command: it needs the optimizer's admin token, {}",
            missing.display()
        )) && stderr(&unreadable).contains("cinch why JOBID"),
        "{}",
        stderr(&unreadable)
    );

    // SIGTERM: a clean exit, logged.
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let log = server.log();
    assert!(
        log.contains("SIGTERM: shutting down") && log.contains("stopped"),
        "{log}"
    );
}

#[test]
fn the_cli_reaches_the_service_over_its_unix_socket_and_keeps_the_token_on_this_host() {
    use std::os::unix::fs::PermissionsExt;
    let server = Server::start("unix");
    let socket = server.state().join("serve.sock");
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660, "socket mode");
    let out = Command::new(CINCH)
        .arg("policy")
        .args(["--url", &format!("unix:{}", socket.display())])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .arg("show")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("version 1"), "{}", stdout(&out));
    // A remote URL over plain HTTP is refused before anything is sent.
    let out = Command::new(CINCH)
        .args(["policy", "--url", "http://192.0.2.1:6830"])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .arg("show")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not on this host"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn serve_speaks_tls_and_the_cli_trusts_only_the_ca_it_is_given() {
    let server = Server::start_with("tls", true);
    let out = server.policy(&["set", "mode=enforce"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Without the CA: the system's CAs do not vouch for it; nothing is sent.
    let out = Command::new(CINCH)
        .args(["policy", "--url", &server.url])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .arg("show")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("certificate"), "{}", stderr(&out));
    // Plain HTTP to the TLS port gets no answer it can use.
    let port = server.url.rsplit(':').next().unwrap();
    let out = Command::new(CINCH)
        .args(["policy", "--url", &format!("http://127.0.0.1:{port}")])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .arg("show")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", stdout(&out));
    // A TLS URL to another host is allowed (the token is encrypted) and fails only to connect.
    let out = Command::new(CINCH)
        .args(["policy", "--url", "https://192.0.2.1:6830"])
        .env("CINCH_STATE_DIR", server.state().join("state"))
        .arg("show")
        .output()
        .unwrap();
    assert!(!stderr(&out).contains("clear text"), "{}", stderr(&out));
}

#[test]
fn serve_refuses_half_a_tls_setting_and_a_key_that_is_not_the_certificates() {
    let dir = std::env::temp_dir().join(format!("cinch-cli-badtls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    make_certificates(&dir.join("a"));
    make_certificates(&dir.join("b"));
    let serve = |cert: Option<&str>, key: Option<&str>| {
        let mut command = Command::new(CINCH);
        command
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("CINCH_STATE_DIR", dir.join("state"));
        if let Some(cert) = cert {
            command.arg("--tls-cert-file").arg(dir.join(cert));
        }
        if let Some(key) = key {
            command.arg("--tls-key-file").arg(dir.join(key));
        }
        command.output().unwrap()
    };
    let out = serve(Some("a/server.pem"), None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("go together"), "{}", stderr(&out));
    let out = serve(Some("a/server.pem"), Some("b/server.key"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("do not make a TLS server"),
        "{}",
        stderr(&out)
    );
    let out = serve(Some("a/missing.pem"), Some("a/server.key"));
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("cannot read certificate file"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_says_clearly_when_the_service_is_not_there() {
    let dir = std::env::temp_dir().join(format!("cinch-cli-absent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("admin.token");
    std::fs::write(&token, "0123456789abcdef-absent\n").unwrap();
    std::process::Command::new("chmod")
        .arg("600")
        .arg(&token)
        .status()
        .unwrap();
    let port = free_port();
    let out = Command::new(CINCH)
        .args([
            "policy",
            "--url",
            &format!("http://127.0.0.1:{port}"),
            "--token-file",
        ])
        .arg(&token)
        .arg("show")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("cannot reach cinch serve"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serve_refuses_a_token_file_others_can_read() {
    let dir = std::env::temp_dir().join(format!("cinch-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token = dir.join("admin.token");
    std::fs::write(&token, "abc\n").unwrap();
    Command::new("chmod")
        .arg("644")
        .arg(&token)
        .status()
        .unwrap();
    let out = Command::new(CINCH)
        .args(["serve", "--state-dir"])
        .arg(dir.join("state"))
        .arg("--admin-token-file")
        .arg(&token)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn sim(args: &[&str]) -> Output {
    Command::new(CINCH).arg("sim").args(args).output().unwrap()
}

#[test]
fn sim_compares_every_policy_and_writes_the_report() {
    let out = std::env::temp_dir().join(format!("cinch-sim-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let output = sim(&["--jobs", "300", "--quiet", "--out", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for policy in [
        "slurm ",
        "slurm-switches",
        "strict",
        "tiresias",
        "qssf",
        "cinch-consolidate",
        "cinch-dally",
        "cinch ",
    ] {
        assert!(stdout.contains(policy), "{policy} missing from:\n{stdout}");
    }
    for file in [
        "summary.csv",
        "jobs.csv",
        "timeline.csv",
        "jct_cdf.svg",
        "gpu_utilization.svg",
        "queue_length.svg",
    ] {
        assert!(out.join(file).is_file(), "{file} not written");
    }
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    assert_eq!(summary.lines().count(), 9, "{summary}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3);
    assert!(html.contains("cinch-consolidate"));
    // The glossary explains exactly the table's columns, and every row fills them all.
    let between = |text: &str, open: &str, close: &str| -> Vec<String> {
        text.split(open)
            .skip(1)
            .filter_map(|r| r.split(close).next())
            .map(str::to_string)
            .collect()
    };
    let table = html.split("</table>").next().unwrap();
    let header = between(table.split("</tr>").next().unwrap(), "<th>", "</th>");
    let glossary = between(
        html.split("<h2>The columns</h2>").nth(1).unwrap(),
        "<dt>",
        "</dt>",
    );
    // A line per policy saying what it is, and the ideal beside the verdict.
    let policies = between(
        html.split("<dl id=\"policies\">")
            .nth(1)
            .and_then(|r| r.split("</dl>").next())
            .unwrap(),
        "<dd>",
        "</dd>",
    );
    assert_eq!(policies.len(), 8, "{policies:?}");
    assert!(
        policies[0].starts_with("Slurm without cinch: Slurm's priority/multifactor"),
        "{policies:?}"
    );
    assert!(policies[2].contains("strict consolidation"), "{policies:?}");
    assert!(html.contains("<p id=\"ideal\">ideal avg JCT"), "{html}");
    // The verdict states its assumptions, and the result without hints beside it.
    for said in [
        "Assumes: hints from 50% of jobs",
        "priority/multifactor with fair share",
        "With no hints and no opt-ins (--hinted 0, every policy run again): ",
    ] {
        assert!(stdout.contains(said), "{said:?} in {stdout}");
    }
    assert!(
        stdout.contains("Slurm's priorities: multifactor with fair share over the 20 users"),
        "{stdout}"
    );
    // Trade-offs name only what some other policy did better.
    if let Some(line) = stdout.lines().find(|l| l.starts_with("Trade-offs:")) {
        for part in line.trim_end_matches('.').split("; ") {
            assert!(
                part.contains(" under "),
                "{part} names no policy that did better"
            );
        }
    }
    let basic = sim(&[
        "--jobs",
        "300",
        "--quiet",
        "--no-report",
        "--priority",
        "basic",
        "--hinted",
        "0",
    ]);
    let text = String::from_utf8_lossy(&basic.stdout);
    assert!(
        text.contains("Slurm's priorities: basic (first in, first out)")
            && !text.contains("With no hints"),
        "{text}"
    );
    assert_eq!(
        header[1..header.len() - 1],
        glossary[..],
        "the glossary names the columns between policy and sim time"
    );
    assert!(!glossary.iter().any(|g| g.contains("QoS")), "{glossary:?}");
    for row in table.split("<tr>").skip(2) {
        assert_eq!(row.matches("<td>").count(), header.len(), "{row}");
    }
    assert!(
        stdout.contains("columns:") && stdout.contains("average JCT"),
        "{stdout}"
    );
    rendered_in_a_browser(&out.join("report.html"));
    let _ = std::fs::remove_dir_all(&out);
}

/// report.html as a real browser renders it (headless Chromium, installed by
/// slurm-conf/install-deps): the page parses, the table, the verdict and the three charts are
/// in the rendered DOM, no image points outside the file (the charts are inline SVG), and a
/// screenshot of it is not blank.
fn rendered_in_a_browser(report: &Path) {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect(
            "a headless browser checks report.html: install chromium (slurm-conf/install-deps)",
        );
    let url = format!("file://{}", report.display());
    let run = |extra: &[&str]| {
        let out = Command::new(browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .args(extra)
            .arg(&url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{browser}: {}", stderr(&out));
        out
    };
    let dom = stdout(&run(&["--dump-dom"]));
    assert!(dom.contains("<table>") || dom.contains("<table"), "{dom}");
    assert_eq!(dom.matches("<svg").count(), 3, "three charts rendered");
    let verdict = dom
        .split("<p id=\"verdict\"><b>")
        .nth(1)
        .and_then(|rest| rest.split("</b>").next())
        .unwrap_or("");
    assert!(
        verdict.contains("average JCT"),
        "the verdict is shown: {dom}"
    );
    assert!(
        dom.contains("id=\"ideal\"") && dom.contains("id=\"policies\""),
        "the ideal and what each policy is are shown: {dom}"
    );
    assert!(
        !dom.contains("<img"),
        "no image that could fail to load: {dom}"
    );
    let shot = report.with_file_name("report.png");
    run(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1200,2400",
    ]);
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    assert!(
        png.len() > 50_000,
        "a blank page compresses to a few KB: {} bytes",
        png.len()
    );
}

#[test]
fn sim_shows_the_perfect_knowledge_reference_apart_from_the_ranking() {
    let output = sim(&[
        "--jobs",
        "300",
        "--quiet",
        "--no-report",
        "--hinted",
        "0",
        "--policies",
        "slurm,qssf,cinch,perfect",
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("perfect ")),
        "{stdout}"
    );
    let reference = stdout
        .lines()
        .find(|l| l.starts_with("Perfect knowledge (perfect, a reference no site can run"))
        .unwrap_or_else(|| panic!("no reference line in {stdout}"));
    assert!(
        reference.contains("closes") || reference.contains("no better than the best baseline"),
        "{reference}"
    );
    // Ranked only among policies a site can run.
    let verdict = stdout
        .lines()
        .find(|l| l.contains("the lowest average JCT") || l.contains("tie on average JCT"))
        .unwrap_or_else(|| panic!("no verdict in {stdout}"));
    assert!(!verdict.contains("perfect"), "{verdict}");
    let bad = sim(&["--jobs", "50", "--no-report", "--policies", "perfect:slurm"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("perfect: takes cinch or a variant of it"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn sim_refuses_bad_input_with_a_clear_error_and_writes_nothing() {
    let out = std::env::temp_dir().join(format!("cinch-sim-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = out.to_str().unwrap();
    let check = |args: &[&str], expected: &str| {
        let output = sim(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?} wrote a report");
    };
    check(&["--cluster", "64", "--out", o], "NODESxGPUS");
    check(
        &["--policies", "slurm,fastest", "--out", o],
        "unknown policy 'fastest'",
    );
    check(&["--congestion=-1", "--out", o], "congestion must be");
    let trace = std::env::temp_dir().join(format!("cinch-sim-bad-{}.csv", std::process::id()));
    std::fs::write(
        &trace,
        "job_id,submit_time,submit_timestamp,duration_s,num_gpus,gpu_time_s,vc,src_row\na,0,x,10,1,10,v,2\nb,5,x,10,many,10,v,3\n",
    )
    .unwrap();
    check(
        &["--trace", trace.to_str().unwrap(), "--out", o],
        ":3: column 'num_gpus'",
    );
    check(
        &["--trace", "/nonexistent/trace.csv", "--out", o],
        "/nonexistent/trace.csv",
    );
    check(&["--limits", "guess", "--out", o], "empirical:FILE");
    check(&["--limits", "noise:9", "--out", o], "from 0 to 3");
    check(
        &["--limits", "empirical:/nonexistent/cedar.csv", "--out", o],
        "/nonexistent/cedar.csv",
    );
    // A trace without limits makes no limit table, and says so.
    let no_limits =
        std::env::temp_dir().join(format!("cinch-sim-nolimits-{}.csv", std::process::id()));
    std::fs::write(
        &no_limits,
        "job_id,submit_time,submit_timestamp,duration_s,num_gpus,gpu_time_s,vc,src_row\na,0,x,10,1,10,v,2\n",
    )
    .unwrap();
    check(
        &[
            "--limits",
            &format!("empirical:{}", no_limits.display()),
            "--out",
            o,
        ],
        "a limit table needs at least 100",
    );
    check(
        &[
            "--workload",
            "heavy-tailed",
            "--trace",
            no_limits.to_str().unwrap(),
            "--out",
            o,
        ],
        "give it or --trace, not both",
    );
    let _ = std::fs::remove_file(&no_limits);
    check(
        &["--workload", "pareto", "--out", o],
        "philly, heavy-tailed",
    );
    check(&["--preemptible", "some", "--out", o], "opted-in, all");
    let suite = |args: &[&str]| {
        Command::new(CINCH)
            .args(["sim", "suite"])
            .args(args)
            .output()
            .unwrap()
    };
    let none = suite(&["--only", "no-such-case"]);
    assert!(!none.status.success());
    assert!(
        stderr(&none).contains("no case to run"),
        "{}",
        stderr(&none)
    );
    // The stress grid needs no data: one shape, in its own table, against its own bar.
    let stress = suite(&[
        "--stress",
        "--only",
        "stress 00:",
        "--policies",
        "slurm,cinch",
        "--check",
        "--timings",
    ]);
    let out = stdout(&stress);
    // --timings says where the time went: each policy's runs, then the family's.
    assert!(out.contains("### Where the time went ("), "{out}");
    for row in ["| slurm | 1 | ", "| cinch | 1 | ", "| Stress cases | 2 | "] {
        assert!(out.contains(row), "no {row:?} in:\n{out}");
    }
    assert!(out.contains("### Stress grid"), "{out}{}", stderr(&stress));
    let line = out
        .lines()
        .find(|l| l.starts_with("| stress 00: 50% one-GPU, 20% of GPU-time in jobs of 8-16 GPUs"))
        .unwrap_or_else(|| panic!("no line for shape 00 in:\n{out}"));
    assert!(line.contains("25% preemptible; 3000 jobs, load "), "{line}");
    assert!(out.contains("over 1.05x the best baseline in "), "{out}");
    // --check judges it: exit 0 when cinch is within 1.05x of Slurm there, else it says so.
    assert_eq!(
        stress.status.success(),
        !stderr(&stress).contains("stress grid: avg JCT <= 1.05x"),
        "{}",
        stderr(&stress)
    );
    let _ = std::fs::remove_file(&trace);
}

/// Limits as the run says: real users' by default, the oracle labelled as such.
#[test]
fn sim_says_which_time_limits_it_ran_with() {
    let real = small_sim(&["--jobs", "200", "--policies", "slurm,strict"]);
    assert!(real.status.success(), "{}", stderr(&real));
    assert!(
        stdout(&real).contains("real limits (Cedar GPU jobs 2021, built-in"),
        "{}",
        stdout(&real)
    );
    assert!(stdout(&real).contains("killed"), "{}", stdout(&real));
    let oracle = small_sim(&[
        "--jobs",
        "200",
        "--policies",
        "slurm,strict",
        "--limits",
        "oracle",
    ]);
    assert!(oracle.status.success(), "{}", stderr(&oracle));
    assert!(
        stdout(&oracle).contains("ORACLE limits"),
        "{}",
        stdout(&oracle)
    );
}

/// `--workload heavy-tailed` generates the shape it names, and the report says which workload ran.
#[test]
fn sim_generates_the_heavy_tailed_workload_on_request() {
    let out = sim(&[
        "--workload",
        "heavy-tailed",
        "--jobs",
        "300",
        "--cluster",
        "8x8",
        "--policies",
        "slurm,cinch",
        "--no-report",
        "--quiet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("built-in, heavy-tailed: 300 jobs"),
        "{}",
        stdout(&out)
    );
}

/// `cinch sim pack` on a small made-up cluster: a table with every policy and the verdict, and a
/// clear error naming the file and line for a malformed pod.
#[test]
fn sim_pack_compares_the_placement_policies_and_names_a_bad_row() {
    let dir = std::env::temp_dir().join(format!("cinch-cli-pack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("alibaba_gpu_v2023_gpu_nodes.csv"),
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,T4\nn1,32000,131072,2,T4\n",
    )
    .unwrap();
    let pods = "job_id,num_gpus,gpu_milli,cpu_milli,memory_mib\n\
                p0,1,500,4000,8192\np1,1,1000,8000,16384\np2,2,1000,8000,16384\np3,0,0,2000,4096\n";
    std::fs::write(dir.join("alibaba_gpu_v2023_pods.csv"), pods).unwrap();
    let out = Command::new(CINCH)
        .args(["sim", "pack", "--runs", "2", "--traces"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    for policy in ["first-fit", "best-fit", "dot-product", "fgd", "cinch"] {
        assert!(table.contains(&format!("| {policy} |")), "{table}");
    }
    assert!(
        table.contains("fewer GPUs unallocated than best fit"),
        "{table}"
    );

    std::fs::write(
        dir.join("alibaba_gpu_v2023_pods.csv"),
        "job_id,num_gpus,gpu_milli,cpu_milli,memory_mib\np0,1,1500,4000,8192\n",
    )
    .unwrap();
    let out = Command::new(CINCH)
        .args(["sim", "pack", "--traces"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("alibaba_gpu_v2023_pods.csv:2") && err.contains("more than one GPU"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cinch sim --share`: bad settings are refused with the reason; on a small congested built-in
/// workload with a made-up pod list of small GPU shares, jobs of one GPU run on shards and the
/// run says how many.
/// `cinch sim` on a 4x2 cluster, no report, no progress, with `args`.
fn small_sim(args: &[&str]) -> Output {
    Command::new(CINCH)
        .args(["sim", "--cluster", "4x2", "--no-report", "--quiet"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn sim_share_runs_small_jobs_on_shards_and_refuses_bad_settings() {
    let dir = cinch_core::testing::ScratchDir::new("cli-share");
    let pods = dir.join("pods.csv");
    std::fs::write(
        &pods,
        "job_id,num_gpus,gpu_milli,cpu_milli,memory_mib\np0,1,200,4000,8192\np1,1,300,4000,8192\n",
    )
    .unwrap();
    for (args, why) in [
        (&["--share", "0.5"][..], "--share needs --share-nodes"),
        (
            &["--share", "1.5", "--share-nodes", "1"][..],
            "--share must be from 0 to 1",
        ),
        (
            &["--share-nodes", "4"][..],
            "must leave some of the 4 nodes whole",
        ),
        (
            &[
                "--share",
                "1",
                "--share-nodes",
                "1",
                "--share-interference",
                "11",
            ][..],
            "--share-interference",
        ),
        (
            &[
                "--share",
                "1",
                "--share-nodes",
                "1",
                "--pods",
                "/nonexistent/pods.csv",
            ][..],
            "/nonexistent/pods.csv",
        ),
    ] {
        let out = small_sim(&[&["--jobs", "50"], args].concat());
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(why), "{args:?}: {}", stderr(&out));
    }
    let pods = pods.display().to_string();
    let out = small_sim(&[
        "--jobs",
        "200",
        "--load",
        "3",
        "--policies",
        "slurm",
        "--share",
        "1",
        "--share-nodes",
        "1",
        "--pods",
        &pods,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.starts_with("slurm: ") && l.contains("opted in to sharing"))
        .unwrap_or_else(|| panic!("{text}"));
    let on_shards: u32 = line
        .split(", ")
        .nth(1)
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(on_shards > 0, "{line}");
    assert!(text.contains("may share, on 1 sharing nodes"), "{text}");
}

/// Negative numbers get a plain message, not clap's "unexpected argument"; `policy set --help`
/// lists what may be set.
#[test]
fn negative_numbers_are_refused_plainly_and_policy_set_lists_its_keys() {
    for (args, why) in [
        (
            &["--cluster", "-4x8"][..],
            "cluster '-4x8' is not NODESxGPUS",
        ),
        (
            &["--racks", "-1"][..],
            "'-1' is not a whole number of 0 or more",
        ),
        (
            &["--congestion", "-1"][..],
            "congestion must be from 0 to 100, not -1",
        ),
        (
            &["--share-interference", "-1"][..],
            "--share-interference must be from 0 to 10",
        ),
        (
            &["--share-stated-error", "-0.5"][..],
            "--share-stated-error must be from 0 to 2",
        ),
    ] {
        let out = Command::new(CINCH).arg("sim").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
    // A replay simulated again against a live run takes the start latency that run measured.
    let out = Command::new(CINCH)
        .args(["replay", "--sim-only", "--start-latency", "-0.5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("'-0.5' is not a number of 0 or more"),
        "{}",
        stderr(&out)
    );
    for command in [
        &["serve"][..],
        &["policy"],
        &["policy", "show"],
        &["policy", "set"],
        &["policy", "history"],
        &["decisions"],
        &["why"],
        &["sim"],
        &["sim", "suite"],
        &["sim", "pack"],
        &["sim", "predict"],
        &["sim", "fidelity"],
        &["sim", "fit-model"],
    ] {
        let out = Command::new(CINCH)
            .args(command)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            stdout(&out).contains("EXAMPLES:"),
            "{command:?} --help has no examples"
        );
    }
    let out = Command::new(CINCH)
        .args(["policy", "set", "--help"])
        .output()
        .unwrap();
    let help = stdout(&out);
    for expected in [
        "mode=off|shadow|enforce",
        "cinch: consolidate=true",
        "tiresias: preempt=true, promote_knob=2.0, thresholds_gpu_h=[0.9,2.0]",
        "(baseline: discretized two-dimensional least-attained-service (Tiresias))",
        "EXAMPLES:",
    ] {
        assert!(help.contains(expected), "{expected:?} in {help}");
    }
}

/// The shipped `slurm-conf/examples/cinch-serve.toml` starts the service as it is, with only its
/// system paths moved under a scratch directory (as the systemd unit's StateDirectory and
/// RuntimeDirectory provide them): it creates both tokens (mode 0600), serves on its Unix socket,
/// and the admin CLI reads the policy with the same config file.
#[test]
fn the_shipped_serve_config_starts_the_service_and_creates_its_tokens() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("cinch-cli-shipped-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../slurm-conf/examples/cinch-serve.toml"
    ))
    .unwrap();
    let port = free_port();
    for path in [
        "\"/var/lib/cinch\"",
        "\"/run/cinch/optimizer.sock\"",
        "\"127.0.0.1:6830\"",
    ] {
        assert!(
            shipped.contains(path),
            "{path} no longer in the example: update this test"
        );
    }
    let moved = shipped
        .replace(
            "\"/var/lib/cinch\"",
            &format!("\"{}\"", dir.join("state").display()),
        )
        .replace(
            "\"/run/cinch/optimizer.sock\"",
            &format!("\"{}\"", dir.join("run/optimizer.sock").display()),
        )
        .replace("\"127.0.0.1:6830\"", &format!("\"127.0.0.1:{port}\""));
    let config = dir.join("cinch-serve.toml");
    std::fs::write(&config, moved).unwrap();
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut child = Command::new(CINCH)
        .args(["serve", "--config"])
        .arg(&config)
        .env_remove("CINCH_STATE_DIR")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let socket = dir.join("run/optimizer.sock");
    let show = || {
        Command::new(CINCH)
            .args(["policy", "--url", &format!("unix:{}", socket.display())])
            .arg("--config")
            .arg(&config)
            .arg("show")
            .output()
            .unwrap()
    };
    let start = Instant::now();
    let out = loop {
        let out = show();
        if out.status.success() {
            break out;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the shipped config did not start: {}\n{}",
            stderr(&out),
            std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        stdout(&out).contains("\nmode:   shadow\n"),
        "{}",
        stdout(&out)
    );
    for token in ["admin.token", "plugin.token"] {
        let mode = std::fs::metadata(dir.join("state").join(token))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{token}");
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn share_table_turns_sacct_output_into_cinch_conf_lines_and_refuses_other_input() {
    use std::io::Write;
    let run = |input: &str| -> Output {
        let mut child = Command::new(CINCH)
            .arg("share-table")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run("JobID|AllocTRES|Comment|TRESUsageInMax|TRESUsageInAve\n\
         7|gres/gpu=1|cinch:app=bert,batch=32||\n\
         7.batch|gres/gpu=1||gres/gpumem=8589934592|gres/gpuutil=57\n");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "# cinch share-table: 1 job(s) of one GPU with an app= hint\n\
         ShareModelMemory=bert:32=8.0G\nShareModelBusy=bert:32=57%\n"
    );
    let out = run("JobID|State\n7|COMPLETED\n");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no AllocTRES column"),
        "{out:?}"
    );
}

/// What a site's optimizer recorded becomes `cinch sim --trace`'s input, on the record's own
/// nodes: 20 jobs seen through snapshots every 30 s, each run on one node of 4x8 GPUs.
#[test]
fn sim_replays_the_optimizers_own_record_on_its_nodes() {
    use cinch_core::learn::record::{Record, RecordLimits};
    use cinch_core::testing::{cluster, pending, snapshot};
    use cinch_core::wire::snapshot::RunningJob;
    let mut record = Record::new(RecordLimits::default());
    // Job i: submitted, started and ended at these times.
    let times = |i: i64| (i * 60, i * 60 + 30, i * 60 + 630 + i * 30);
    for t in (0..3600).step_by(30) {
        let mut snap = snapshot(cluster(4, 8, 2), vec![]);
        snap.time = t;
        for i in 1..=20u32 {
            let (s, b, e) = times(i64::from(i));
            if (s..b).contains(&t) {
                let mut job = pending(i, 2);
                job.submit_time = s;
                job.user = format!("u{}", i % 3);
                job.time_limit_min = Some(60);
                snap.pending.push(job);
            } else if (b..e).contains(&t) {
                snap.running.push(RunningJob {
                    job_id: i,
                    user: format!("u{}", i % 3),
                    nodes: vec![format!("n{}", i % 4 + 1)],
                    gpus: 2,
                    start_time: b,
                    submit_time: Some(s),
                    time_limit_min: Some(60),
                    ..RunningJob::default()
                });
            }
        }
        record.observe(&snap);
    }
    let dir = std::env::temp_dir().join(format!("cinch-sim-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("record.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    record.write(&mut file).unwrap();
    drop(file);
    let out = sim(&[
        "--trace",
        path.to_str().unwrap(),
        "--policies",
        "slurm,cinch",
        "--no-report",
        "--quiet",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(stdout.contains("(CinchRecord)"), "{stdout}");
    assert!(
        stdout.contains("hints and requeue opt-ins as recorded"),
        "{stdout}"
    );
    assert!(stdout.contains("4x8"), "the record's nodes:\n{stdout}");
    assert!(stdout.contains("20 jobs"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A simulated run's record (what its optimizer saw) replayed under each member of the
/// portfolio: every member scored on the window, the recorded outcome beside them; bad
/// arguments refused with what is wrong.
#[test]
fn sim_evaluate_replays_a_window_of_a_record_under_each_member() {
    let dir = std::env::temp_dir().join(format!("cinch-sim-evaluate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("record.jsonl");
    let out = sim(&[
        "--jobs",
        "400",
        "--load",
        "1.2",
        "--cluster",
        "8x8",
        "--policies",
        "cinch",
        "--no-report",
        "--quiet",
        "--record-out",
        record.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(
        stdout.contains("record: ") && stdout.contains("as cinch's optimizer saw them"),
        "{stdout}"
    );
    let evaluate = |extra: &[&str]| {
        let mut args = vec!["evaluate", "--record", record.to_str().unwrap()];
        args.extend_from_slice(extra);
        sim(&args)
    };
    // Windows of 12 h every 12 h, each paired with the next; then with the record's own policy
    // in force.
    let every_12h = ["--window-hours", "12", "--every-hours", "12", "--draws"];
    let succeeded = |out: std::process::Output| {
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
        stdout
    };
    let stdout = succeeded(evaluate(&[&every_12h[..], &["2"]].concat()));
    for member in [
        "slurm ",
        "tiresias ",
        "qssf ",
        "strict ",
        "cinch ",
        "recorded ",
        "best: ",
    ] {
        assert!(stdout.contains(member), "{member} missing from:\n{stdout}");
    }
    assert!(stdout.contains("cluster 8x8 GPUs"), "{stdout}");
    assert!(stdout.contains("windows:"), "{stdout}");
    // The run recorded jobs of several users under multifactor fair share: its replays order
    // jobs the same way unless told otherwise.
    assert!(
        stdout
            .contains("replays: Slurm's priorities multifactor with fair share over the record's")
            && !stdout.contains("record's 0 users")
            && !stdout.contains("record's 1 users"),
        "{stdout}"
    );
    let basic = succeeded(evaluate(
        &[&every_12h[..], &["1", "--priority", "basic"]].concat(),
    ));
    assert!(
        basic.contains("replays: Slurm's priorities basic (first in, first out)"),
        "{basic}"
    );
    // Whether a lead held on the next window, over what the record shows ran.
    assert!(
        stdout.contains("did a lead hold on the next window?")
            && stdout.contains("pairs of a window")
            && stdout.contains("below what ran (the record)")
            && stdout.contains("staying "),
        "{stdout}"
    );
    // With the record's own policy in force, over its replay, each replay drained 6 h and
    // scoring the jobs of its first 8 h.
    let stdout = succeeded(evaluate(
        &[
            &every_12h[..],
            &[
                "1",
                "--in-force",
                "cinch",
                "--drain-hours",
                "6",
                "--follow-hours",
                "4",
            ],
        ]
        .concat(),
    ));
    assert!(
        stdout.contains("below cinch's replay (in force)"),
        "{stdout}"
    );
    for (args, wrong) in [
        (
            &["--margin", "1.5"][..],
            "--margin must be from 0 to below 1",
        ),
        (&["--draws", "0"][..], "--draws must be from 1 to 20"),
        (
            &["--drain-hours", "-1"][..],
            "--drain-hours: drain_h must be from 0 to 744",
        ),
        (
            &["--follow-hours", "-1"][..],
            "--follow-hours: follow_h must be from 0 to 744",
        ),
        (
            &["--window-hours", "6", "--follow-hours", "6"][..],
            "--follow-hours must be less than --window-hours (6)",
        ),
        (
            &["--round-interval", "-5"][..],
            "--round-interval must be from 0 to 3600",
        ),
        (&["--end", "-5"][..], "is not within the record"),
        (
            &["--window-hours", "0"][..],
            "--window-hours must be above 0",
        ),
        (&["--members", "nosuch"][..], "nosuch"),
    ] {
        let out = evaluate(args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(wrong), "{args:?}: {}", stderr(&out));
    }
    let out = sim(&[
        "evaluate",
        "--record",
        dir.join("missing").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--record"), "{}", stderr(&out));
    // A record whose jobs all belong to one user has no fair share to replay: asked for, it is
    // refused; left to `auto`, the replays order first in, first out.
    let one_user = dir.join("one-user.jsonl");
    let rewritten: String = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|line| {
            let mut value: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(user) = value.get_mut("user") {
                *user = serde_json::Value::from("alice");
            }
            format!("{value}\n")
        })
        .collect();
    assert!(rewritten.contains(r#""user":"alice""#), "no job has a user");
    std::fs::write(&one_user, rewritten).unwrap();
    let on_one_user = |extra: &[&str]| {
        let mut args = vec!["evaluate", "--record", one_user.to_str().unwrap()];
        args.extend_from_slice(&every_12h[..]);
        args.push("1");
        args.extend_from_slice(extra);
        sim(&args)
    };
    let out = on_one_user(&["--priority", "multifactor"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--priority multifactor needs jobs with users")
            && stderr(&out).contains("the record has 1"),
        "{}",
        stderr(&out)
    );
    let auto = succeeded(on_one_user(&[]));
    assert!(
        auto.contains("replays: Slurm's priorities basic (first in, first out)"),
        "{auto}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The portfolio live, end to end through `cinch serve` and the admin CLI: fed a recorded hour
/// on which Tiresias serves best, an evaluation switches to it and `cinch policy show` says why.
#[test]
fn the_portfolio_switches_live_and_policy_show_says_why() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let server = Server::start_prepared("portfolio", false, |state| {
        std::fs::write(
            state.join("record.jsonl"),
            cinch_core::testing::record_where_a_long_job_held_up_short_ones(now),
        )
        .unwrap();
    });
    let set = server.policy(&[
        "set",
        "policy=portfolio",
        r#"members=["cinch","tiresias","slurm"]"#,
        "window_h=1",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    let show = server.policy(&["show"]);
    assert!(
        stdout(&show).contains("in force: cinch"),
        "{}",
        stdout(&show)
    );
    assert!(
        stdout(&show).contains("no evaluation yet"),
        "{}",
        stdout(&show)
    );
    let evaluate = server.policy(&["evaluate"]);
    assert!(evaluate.status.success(), "{}", stderr(&evaluate));
    assert!(
        stdout(&evaluate).contains("in force: tiresias"),
        "{}",
        stdout(&evaluate)
    );
    let show = stdout(&server.policy(&["show"]));
    assert!(show.contains("policy: portfolio"), "{show}");
    assert!(show.contains("in force: tiresias, since "), "{show}");
    // With which round the replays ran (no agent has reported cinch.conf's here).
    assert!(
        show.contains("replayed with IntervalSeconds=5 MaxRequeuesPerJob=10"),
        "{show}"
    );
    for member in ["cinch", "tiresias", "slurm"] {
        assert!(show.contains(&format!("  {member} ")), "{member}: {show}");
    }
    assert!(
        show.contains("why: tiresias ")
            && show.contains("against cinch's")
            && show.contains("switched"),
        "{show}"
    );
    assert!(
        server.log().contains("portfolio: switched member"),
        "{}",
        server.log()
    );
    // Another `cinch serve` on a copy of the state directory, as after a crash (nothing written
    // at shutdown): Tiresias still decides, since the same time, and says why.
    let in_force = show
        .lines()
        .find(|l| l.starts_with("in force: "))
        .unwrap()
        .to_string();
    let restarted = Server::start_prepared("portfolio-restarted", false, |state| {
        for entry in std::fs::read_dir(server.state().join("state")).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), state.join(entry.file_name())).unwrap();
            }
        }
    });
    let again = stdout(&restarted.policy(&["show"]));
    assert!(again.contains(&format!("{in_force}\n")), "{again}");
    assert!(again.contains("why: tiresias "), "{again}");
    drop(restarted);

    // With the parameter search on, two variants of cinch are bred and replayed beside the
    // members, and the best are kept and shown.
    let set = server.policy(&[
        "set",
        "policy=portfolio",
        r#"members=["cinch","tiresias"]"#,
        "window_h=1",
        "search=2",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    let evaluate = server.policy(&["evaluate"]);
    assert!(evaluate.status.success(), "{}", stderr(&evaluate));
    let bred = stdout(&evaluate)
        .lines()
        .filter(|l| l.trim_start().starts_with("cinch:"))
        .count();
    assert_eq!(bred, 2, "{}", stdout(&evaluate));
    let show = stdout(&server.policy(&["show"]));
    assert!(
        show.contains("variants the parameter search keeps: cinch:"),
        "{show}"
    );
    assert!(show.contains("fairness"), "{show}");
    // The admin's objective and guards: the p99, a guard on fairness; a wrong one refused.
    let set = server.policy(&[
        "set",
        "policy=portfolio",
        r#"members=["cinch","tiresias"]"#,
        "window_h=1",
        "objective=p99",
        "min_fairness=0.5",
    ]);
    assert!(set.status.success(), "{}", stderr(&set));
    let evaluate = server.policy(&["evaluate"]);
    assert!(evaluate.status.success(), "{}", stderr(&evaluate));
    assert!(stdout(&evaluate).contains(" p99 "), "{}", stdout(&evaluate));
    let bad = server.policy(&["set", "policy=portfolio", "objective=median"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("objective must be mean, p99 or qos, not 'median'"),
        "{}",
        stderr(&bad)
    );
    let bad = server.policy(&["set", "policy=portfolio", "search=21"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("search must be from 0 to 20"),
        "{}",
        stderr(&bad)
    );
}
