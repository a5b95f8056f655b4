//! The HTTP API driven through `app()` without a socket: every endpoint, its auth, and what bad
//! input gets (a precise error and no change).

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

use cinch_core::testing::{cluster, pending, snapshot};
use cinch_service::config::{ServeConfig, ServeOptions};
use cinch_service::server::build_state;
use cinch_service::{app, ApiDoc, AppState};

struct Api {
    router: Router,
    state: Arc<AppState>,
    admin: String,
    plugin: String,
    dir: PathBuf,
}

impl Api {
    fn new(name: &str) -> Api {
        Api::with(name, ServeOptions::default())
    }

    fn with(name: &str, options: ServeOptions) -> Api {
        let dir = std::env::temp_dir().join(format!("cinch-api-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Api::open(dir, options)
    }

    /// The service on an existing state directory (a restart).
    fn open(dir: PathBuf, options: ServeOptions) -> Api {
        let config = ServeConfig::resolve(ServeOptions {
            state_dir: Some(dir.clone()),
            ..options
        })
        .unwrap();
        let state = build_state(&config).unwrap();
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .unwrap()
                .trim()
                .to_string()
        };
        Api {
            router: app(state.clone()),
            admin: read("admin.token"),
            plugin: read("plugin.token"),
            state,
            dir,
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::from(body.to_string())).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    async fn admin(&self, method: Method, path: &str, body: &str) -> (StatusCode, Value) {
        self.call(method, path, Some(&self.admin.clone()), body)
            .await
    }

    /// PATCHes the policy as the admin and checks that it took.
    async fn patch_policy(&self, body: &str) {
        let (status, answer) = self.admin(Method::PATCH, "/v1/policy", body).await;
        assert_eq!(status, StatusCode::OK, "PATCH {body}: {answer}");
    }

    async fn schedule(&self, body: &str) -> (StatusCode, Value) {
        self.call(
            Method::POST,
            "/v1/schedule",
            Some(&self.plugin.clone()),
            body,
        )
        .await
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn two_jobs() -> String {
    let mut big = pending(7, 16);
    big.user = "ann".into();
    let mut small = pending(8, 4);
    small.user = "bob".into();
    serde_json::to_string(&snapshot(cluster(4, 8, 2), vec![big, small])).unwrap()
}

#[tokio::test]
async fn operations_endpoints_need_no_token() {
    let api = Api::new("ops");
    let (status, body) = api.call(Method::GET, "/healthz", None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["policy_version"], 1);
    let (status, body) = api.call(Method::GET, "/metrics", None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body
        .as_str()
        .unwrap()
        .contains("cinch_snapshots_received_total 0"));
    let (status, body) = api.call(Method::GET, "/openapi.json", None, "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body["paths"]["/v1/schedule"]["post"].is_object());
}

#[tokio::test]
async fn every_protected_endpoint_refuses_missing_and_wrong_tokens() {
    let api = Api::new("auth");
    let plugin = api.plugin.clone();
    let cases = [
        (Method::POST, "/v1/schedule"),
        (Method::POST, "/v1/schedule/delta"),
        (Method::GET, "/v1/policy"),
        (Method::PUT, "/v1/policy"),
        (Method::PATCH, "/v1/policy"),
        (Method::GET, "/v1/policy/history"),
        (Method::GET, "/v1/decisions"),
        (Method::GET, "/v1/jobs/7/decision"),
    ];
    for (method, path) in cases {
        for token in [None, Some("wrong"), Some("")] {
            let (status, body) = api.call(method.clone(), path, token, "{}").await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with {token:?}"
            );
            assert_eq!(body["error"], "unauthorized");
        }
        if !path.starts_with("/v1/schedule") {
            // The plugin's token must not reach admin endpoints.
            let (status, _) = api.call(method.clone(), path, Some(&plugin), "{}").await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {path} with the plugin token"
            );
        }
    }
    // The header says how to authenticate.
    let response = api
        .router
        .clone()
        .oneshot(Request::get("/v1/policy").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    let (_, metrics) = api.call(Method::GET, "/metrics", None, "").await;
    assert!(metrics
        .as_str()
        .unwrap()
        .contains("cinch_http_errors_total{status=\"401\"}"));
}

/// A stand-in for `unmunge`: the credential `user:uid:payload` decodes to that user and payload
/// (`replayed:...` as munged's refusal of a credential seen before); it notes its arguments.
fn fake_unmunge(dir: &std::path::Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("unmunge");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >{args}\nread -r cred\nuser=${{cred%%:*}}; rest=${{cred#*:}}\n\
         uid=${{rest%%:*}}; payload=${{rest#*:}}\n\
         if [ \"$user\" = replayed ]; then status='Replayed credential (17)'; code=17; \
         else status='Success (0)'; code=0; fi\n\
         printf 'STATUS:          %s\\nUID:             %s (%s)\\nGID:             x (1)\\n\\n%s' \
         \"$status\" \"$user\" \"$uid\" \"$payload\"\nexit $code\n",
        args = dir.join("args").display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_user_reads_the_latest_decision_about_their_own_jobs_only_with_a_munge_credential() {
    let bin = std::env::temp_dir().join(format!("cinch-api-munge-bin-{}", std::process::id()));
    let api = Api::with(
        "munge",
        ServeOptions {
            unmunge: Some(fake_unmunge(&bin)),
            munge_socket: Some("/run/site/munge.socket".into()),
            ..ServeOptions::default()
        },
    );
    let (status, body) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let with_munge = |credential: &str, job: u32| {
        let request = Request::get(format!("/v1/jobs/{job}/decision"))
            .header(header::AUTHORIZATION, format!("Munge {credential}"))
            .body(Body::empty())
            .unwrap();
        let router = api.router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    // ann's own job: her credential for it gets the decision the log holds, reason and all.
    let (status, body) = with_munge("ann:1000:cinch-why 7", 7).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"], "ann");
    assert_eq!(body["decision"]["job_id"], 7);
    assert!(!body["decision"]["reason"].as_str().unwrap().is_empty());
    let args = std::fs::read_to_string(bin.join("args")).unwrap();
    assert_eq!(args.trim(), "--socket=/run/site/munge.socket");
    // bob's job: the same answer as for a job nobody decided about.
    let (status, body) = with_munge("ann:1000:cinch-why 8", 8).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        body["message"],
        "the optimizer has recorded no decision about job 8 of user ann"
    );
    let (status, _) = with_munge("ann:1000:cinch-why 99", 99).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A credential made for another job, or refused by munged, proves nothing.
    let (status, body) = with_munge("ann:1000:cinch-why 8", 7).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not 'cinch-why 7'"),
        "{body}"
    );
    let (status, body) = with_munge("replayed:1000:cinch-why 7", 7).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("Replayed credential (17)"),
        "{body}"
    );
    // root, and the admin token, may ask about any job.
    let (status, body) = with_munge("root:0:cinch-why 8", 8).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"], "bob");
    let (status, body) = api.admin(Method::GET, "/v1/jobs/8/decision", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = api.admin(Method::GET, "/v1/jobs/x/decision", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let _ = std::fs::remove_dir_all(&bin);
}

#[tokio::test]
async fn a_service_that_cannot_run_unmunge_says_so() {
    let api = Api::with(
        "no-unmunge",
        ServeOptions {
            unmunge: Some("/nonexistent/unmunge".into()),
            ..ServeOptions::default()
        },
    );
    let request = Request::get("/v1/jobs/7/decision")
        .header(header::AUTHORIZATION, "Munge MUNGE:AwQ:")
        .body(Body::empty())
        .unwrap();
    let response = api.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot run /nonexistent/unmunge to check a MUNGE credential"),
        "{body}"
    );
}

#[tokio::test]
async fn schedule_returns_decisions_with_reasons_and_logs_them() {
    let api = Api::new("schedule");
    let (status, body) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["policy"], "cinch");
    assert_eq!(body["mode"], "shadow", "the default mode is shadow");
    let decisions = body["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 2);
    // The 4-GPU job has less predicted service (same limit): it goes first, on one node of
    // rack r1; the 16-GPU one then takes rack r2 whole.
    assert_eq!(decisions[0]["job_id"], 8);
    assert_eq!(decisions[0]["pin_nodes"], json!(["n1"]));
    // cinch's order as a raise on top of Slurm's own priority: the first job raised more.
    assert!(
        decisions[0]["nice"].as_i64().unwrap() < decisions[1]["nice"].as_i64().unwrap(),
        "{decisions:?}"
    );
    assert!(decisions.iter().all(|d| d["priority"].is_null()));
    assert_eq!(decisions[1]["job_id"], 7);
    assert_eq!(decisions[1]["pin_nodes"], json!(["n3", "n4"]));
    assert!(decisions[1]["reason"].as_str().unwrap().contains("rack r2"));

    // The admin token may also ask (what-if).
    let (status, _) = api
        .call(
            Method::POST,
            "/v1/schedule",
            Some(&api.admin.clone()),
            &two_jobs(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, log) = api.admin(Method::GET, "/v1/decisions?user=bob", "").await;
    assert_eq!(status, StatusCode::OK);
    let log = log.as_array().unwrap();
    assert_eq!(
        log.len(),
        1,
        "two snapshots, the same decision for bob: the log records changes, not renewals"
    );
    assert!(log
        .iter()
        .all(|r| r["user"] == "bob" && r["decision"]["job_id"] == 8));
    let (_, by_job) = api
        .admin(Method::GET, "/v1/decisions?job_id=7&limit=1", "")
        .await;
    assert_eq!(by_job.as_array().unwrap().len(), 1);
    assert_eq!(by_job[0]["decision"]["job_id"], 7);

    let (_, metrics) = api.call(Method::GET, "/metrics", None, "").await;
    let metrics = metrics.as_str().unwrap().to_string();
    assert!(
        metrics.contains("cinch_snapshots_received_total 2"),
        "{metrics}"
    );
    for expected in [
        "cinch_decisions_total{action=\"pin\",reason=\"predicted\"} 4",
        "cinch_decision_latency_seconds_count 2",
        "cinch_build_info{version=\"",
        "cinch_policy_in_force{policy=\"cinch\",mode=\"shadow\"} 1",
        "cinch_cluster_gpus{state=\"total\"} 32",
        "cinch_cluster_jobs{state=\"pending\"} 2",
    ] {
        assert!(metrics.contains(expected), "{expected} in {metrics}");
    }
    // No plugin has reported: no agent gauges have values yet.
    assert!(!metrics.contains("cinch_agent_mode{"), "{metrics}");
}

/// The delta exchange answers what `/v1/schedule` answers for the snapshot the delta tells,
/// sending only the decisions that changed; a base it does not keep is a 409 and a delta that
/// does not add up a 422, and neither changes what the next delta builds on.
#[tokio::test]
async fn the_delta_exchange_decides_as_the_whole_snapshot_would() {
    use cinch_core::wire::exchange::{DecisionsDelta, Sender};
    use cinch_core::Decisions;
    let api = Api::new("delta");
    let plugin = api.plugin.clone();
    let delta = |body: String| {
        let (api, plugin) = (&api, plugin.clone());
        async move {
            api.call(Method::POST, "/v1/schedule/delta", Some(&plugin), &body)
                .await
        }
    };
    let whole: cinch_core::Snapshot = serde_json::from_str(&two_jobs()).unwrap();
    let (status, expected) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK, "{expected}");
    let expected: Decisions = serde_json::from_value(expected).unwrap();

    let mut sender = Sender::default();
    let out = sender.delta(&whole);
    let (status, body) = delta(serde_json::to_string(&out.delta).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let first: DecisionsDelta = serde_json::from_value(body).unwrap();
    assert_eq!((first.base, first.changed.len()), (None, 2));
    assert_eq!(sender.receive(out, first.clone()).unwrap(), expected);
    sender.give_back(expected.clone());

    // The same cluster again: nothing sent, nothing answered but the order, the same decisions.
    let out = sender.delta(&whole);
    assert!(out.delta.pending.changed.is_empty() && out.delta.nodes.is_none());
    let (status, body) = delta(serde_json::to_string(&out.delta).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let second: DecisionsDelta = serde_json::from_value(body).unwrap();
    assert_eq!(second.base, Some(first.exchange));
    assert!(second.changed.is_empty(), "{second:?}");
    assert_eq!(sender.receive(out, second).unwrap(), expected);
    sender.give_back(expected.clone());

    // A base it never had, then one that names a job it never saw.
    let mut stale = sender.delta(&whole).delta;
    stale.base = Some(first.exchange.wrapping_sub(1));
    let (status, body) = delta(serde_json::to_string(&stale).unwrap()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"], "conflict");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("send the whole snapshot"));
    let mut wrong = sender.delta(&whole).delta;
    wrong.pending.order.push(99);
    let (status, body) = delta(serde_json::to_string(&wrong).unwrap()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("pending job 99"),
        "{body}"
    );
    // A rebuilt snapshot is validated as any other.
    let mut invalid = Sender::default().delta(&whole).delta;
    invalid.time = -1;
    let (status, body) = delta(serde_json::to_string(&invalid).unwrap()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["message"]
        .as_str()
        .unwrap()
        .contains("invalid snapshot"));

    // The plugin's base still holds.
    let out = sender.delta(&whole);
    let (status, body) = delta(serde_json::to_string(&out.delta).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let third: DecisionsDelta = serde_json::from_value(body).unwrap();
    assert_eq!(sender.receive(out, third).unwrap(), expected);
}

/// Asserts that each series the shipped Grafana dashboard queries, among those `which` selects,
/// is one `metrics` (a /metrics page) declares; how many it checked.
fn assert_dashboard_queries_exported(metrics: &str, which: impl Fn(&str) -> bool) -> usize {
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../slurm-conf/examples/grafana-cinch.json"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("cinch_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !which(&name) {
                    continue;
                }
                queried += 1;
                // A family is declared (`# TYPE base kind`) once it has a sample.
                let base = ["_total", "_bucket", "_count", "_sum", "_info"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .unwrap_or(&name);
                assert!(
                    metrics.contains(&format!("# TYPE {base} ")),
                    "the dashboard queries {name}, which /metrics does not have:\n{metrics}"
                );
            }
        }
    }
    queried
}

#[tokio::test]
async fn the_agents_report_becomes_gauges() {
    let api = Api::new("agent");
    let mut snap: serde_json::Value = serde_json::from_str(&two_jobs()).unwrap();
    snap["agent"] = json!({"mode": "enforce", "breaker_open": false,
        "applied": {"pin": 3, "delay": 1}, "last_round_s": 0.25, "failed_rounds": 2});
    let (status, body) = api.schedule(&snap.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // One refused call, so that every family has a sample (empty ones are not exposed).
    let (status, _) = api.call(Method::GET, "/v1/policy", Some("wrong"), "").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, metrics) = api.call(Method::GET, "/metrics", None, "").await;
    let metrics = metrics.as_str().unwrap().to_string();
    for expected in [
        "cinch_agent_mode{mode=\"enforce\"} 1",
        "cinch_agent_breaker_open 0",
        "cinch_agent_jobs_changed{change=\"pin\"} 3",
        "cinch_agent_jobs_changed{change=\"hold\"} 0",
        "cinch_agent_round_seconds 0.25",
        "cinch_agent_failed_rounds 2",
    ] {
        assert!(metrics.contains(expected), "{expected} in {metrics}");
    }
    // Every series the shipped Grafana dashboard queries is one the service exports (the
    // portfolio's, which only a portfolio has, in its own test).
    let queried =
        assert_dashboard_queries_exported(&metrics, |name| !name.starts_with("cinch_portfolio_"));
    assert!(queried >= 10, "{queried}");
    // A report with an unknown field is refused, and changes nothing.
    snap["agent"]["surprise"] = json!(1);
    let (status, _) = api.schedule(&snap.to_string()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn bad_snapshots_get_precise_errors() {
    let api = Api::new("bad-snapshots");
    let (status, body) = api.schedule("{\"schema_version\":1,").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("malformed JSON"),
        "{body}"
    );

    let (status, body) = api
        .schedule(r#"{"schema_version":1,"time":1,"nodez":[]}"#)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `nodez`"),
        "{body}"
    );

    let (status, body) = api.schedule(r#"{"schema_version":2,"time":1}"#).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("schema_version 2"),
        "{body}"
    );

    let (status, body) = api
        .schedule(r#"{"schema_version":1,"time":1,"nodes":[{"name":"n1","gpus_total":-8}]}"#)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["message"].as_str().unwrap().contains("-8"), "{body}");

    let unknown_node = r#"{"schema_version":1,"time":1,"nodes":[],"running":[
        {"job_id":1,"nodes":["ghost"],"gpus":1,"start_time":0}]}"#;
    let (status, body) = api.schedule(unknown_node).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("unknown node 'ghost'"),
        "{body}"
    );

    let (status, body) = api
        .schedule(r#"{"schema_version":1,"time":1,"nodes":[{"name":"n1","gpus_total":NaN}]}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    let (_, log) = api.admin(Method::GET, "/v1/decisions", "").await;
    assert_eq!(
        log,
        json!([]),
        "refused snapshots leave no decisions behind"
    );
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused() {
    let api = Api::with(
        "limit",
        ServeOptions {
            max_body_bytes: Some(1024),
            ..ServeOptions::default()
        },
    );
    let big = serde_json::to_string(&snapshot(cluster(40, 8, 2), vec![pending(1, 8)])).unwrap();
    assert!(big.len() > 1024);
    let (status, body) = api.schedule(&big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["message"].as_str().unwrap().contains("1024 bytes"));
}

#[tokio::test]
async fn policy_put_patch_history_and_what_a_refusal_leaves() {
    let api = Api::new("policy");
    let (status, initial) = api.admin(Method::GET, "/v1/policy", "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(initial["version"], 1);
    assert_eq!(initial["settings"]["mode"], "shadow");
    assert_eq!(initial["settings"]["policy"]["name"], "cinch");

    let (status, put) = api
        .admin(
            Method::PUT,
            "/v1/policy",
            r#"{"mode":"enforce","policy":{"name":"passthrough"}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{put}");
    assert_eq!(put["version"], 2);

    let (status, patched) = api
        .admin(
            Method::PATCH,
            "/v1/policy",
            r#"{"policy":{"name":"consolidate","params":{"ttl_s":90}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{patched}");
    assert_eq!(patched["version"], 3);
    assert_eq!(
        patched["settings"]["mode"], "enforce",
        "a patch keeps what it does not name"
    );
    assert_eq!(patched["settings"]["policy"]["params"]["ttl_s"], 90);
    assert_eq!(patched["settings"]["policy"]["params"]["min_gpus"], 2);

    let refused: [(Method, &str, StatusCode, &str); 10] = [
        // A wrong type where an enum is expected: serde_json calls it a syntax error, but the
        // body is valid JSON, so it is content the API refuses (422), as docs/api.md says.
        (
            Method::PUT,
            r#"{"mode":5,"policy":{"name":"consolidate"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong type",
        ),
        (
            Method::PUT,
            r#"[1]"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "wrong type",
        ),
        (
            Method::PUT,
            r#"{"mode":"enforce","policy":{"name":"consolidate","params":{"ttl_s":-1}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "-1",
        ),
        (
            Method::PUT,
            r#"{"mode":"enforce","policy":{"name":"consolidate","params":{"ttl_s":0}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "ttl_s must be from 1",
        ),
        (
            Method::PUT,
            r#"{"mode":"fast","policy":{"name":"consolidate"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown variant `fast`",
        ),
        (
            Method::PUT,
            r#"{"mode":"off","policy":{"name":"magic"}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown policy 'magic'",
        ),
        (
            Method::PUT,
            r#"{"mode":"off"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing field `policy`",
        ),
        (
            Method::PATCH,
            r#"{"policy":{"params":{"weight":NaN}}}"#,
            StatusCode::BAD_REQUEST,
            "malformed JSON",
        ),
        (
            Method::PATCH,
            r#"[1,2]"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "must be a JSON object",
        ),
        (
            Method::PATCH,
            r#"{"policy":{"params":{"surprise":true}}}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown field `surprise`",
        ),
    ];
    let file = api.state.store.path().to_path_buf();
    let on_disk = std::fs::read(&file).unwrap();
    for (method, body, expected, message) in refused {
        let (status, answer) = api.admin(method.clone(), "/v1/policy", body).await;
        assert_eq!(status, expected, "{method} {body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(message),
            "{method} {body}: {answer}"
        );
    }
    // An empty patch asks for nothing: the current version, no new one.
    let (status, same) = api.admin(Method::PATCH, "/v1/policy", "{}").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(same, patched, "PATCH {{}} changes nothing");
    let (_, now) = api.admin(Method::GET, "/v1/policy", "").await;
    assert_eq!(now, patched, "refused requests changed nothing");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        on_disk,
        "nor anything on disk"
    );

    let (_, history) = api.admin(Method::GET, "/v1/policy/history", "").await;
    let versions: Vec<u64> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["version"].as_u64().unwrap())
        .collect();
    assert_eq!(versions, vec![1, 2, 3]);
    let (_, newest) = api
        .admin(Method::GET, "/v1/policy/history?limit=1", "")
        .await;
    assert_eq!(newest.as_array().unwrap().len(), 1);
    assert_eq!(newest[0]["version"], 3);
    let (status, _) = api
        .admin(Method::GET, "/v1/policy/history?limit=lots", "")
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api.admin(Method::GET, "/v1/decisions?limit=0", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn the_policy_survives_a_restart() {
    let api = Api::new("restart");
    api.patch_policy(r#"{"mode":"enforce"}"#).await;
    let dir = api.dir.clone();
    let restarted = Api::open(dir, ServeOptions::default());
    std::mem::forget(api); // the restarted service owns the directory now
    let (_, now) = restarted.admin(Method::GET, "/v1/policy", "").await;
    assert_eq!(now["version"], 2);
    assert_eq!(now["settings"]["mode"], "enforce");
    let (_, history) = restarted.admin(Method::GET, "/v1/policy/history", "").await;
    assert_eq!(history.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn modes_decide_what_schedule_returns() {
    let api = Api::new("modes");
    let (_, _) = api
        .admin(Method::PATCH, "/v1/policy", r#"{"mode":"off"}"#)
        .await;
    let (status, body) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["mode"], "off");
    assert_eq!(body["decisions"], json!([]));

    let (_, _) = api
        .admin(Method::PATCH, "/v1/policy", r#"{"mode":"enforce"}"#)
        .await;
    let (_, body) = api.schedule(&two_jobs()).await;
    assert_eq!(body["mode"], "enforce");
    assert_eq!(body["decisions"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn every_answer_says_whose_stated_targets_the_policy_counts() {
    let api = Api::new("stated-targets");
    let (_, body) = api.schedule(&two_jobs()).await;
    // cinch's default: nobody's.
    assert_eq!(
        body["stated_targets"],
        json!({"count": "listed", "accounts": [], "qos": []}),
        "{body}"
    );
    api.patch_policy(
        r#"{"mode":"enforce","policy":{"name":"cinch","params":{"user_target_qos":["urgent"]}}}"#,
    )
    .await;
    let (_, body) = api.schedule(&two_jobs()).await;
    assert_eq!(
        body["stated_targets"],
        json!({"count": "listed", "accounts": [], "qos": ["urgent"]})
    );
    for (policy, said) in [
        ("edf", json!({"count": "everyone"})),
        ("tiresias", json!({"count": "unused", "policy": "tiresias"})),
    ] {
        let patch = format!(r#"{{"policy":{{"name":"{policy}"}}}}"#);
        api.patch_policy(&patch).await;
        let (_, body) = api.schedule(&two_jobs()).await;
        assert_eq!(body["stated_targets"], said, "{policy}");
    }
    let (_, _) = api
        .admin(Method::PATCH, "/v1/policy", r#"{"mode":"off"}"#)
        .await;
    let (_, body) = api.schedule(&two_jobs()).await;
    assert_eq!(
        body["stated_targets"],
        json!({"count": "unused", "policy": "tiresias, with mode off"})
    );
}

#[test]
fn openapi_matches_the_committed_snapshot() {
    let generated = ApiDoc::openapi_json();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    if std::env::var_os("CINCH_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json differs from the API the code serves; if the change is intended, \
         run CINCH_UPDATE_SNAPSHOTS=1 cargo test -p cinch-service --test api and commit it"
    );
}

#[tokio::test]
async fn the_baselines_are_live_policies_too() {
    let api = Api::new("baselines");
    for name in ["strict", "switches", "tiresias", "qssf"] {
        let (status, body) = api
            .admin(
                Method::PUT,
                "/v1/policy",
                &format!(r#"{{"mode":"enforce","policy":{{"name":"{name}"}}}}"#),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        let (status, body) = api.schedule(&two_jobs()).await;
        assert_eq!(status, StatusCode::OK, "{name}: {body}");
        assert_eq!(body["policy"], name);
        assert_eq!(
            body["decisions"].as_array().unwrap().len(),
            2,
            "{name}: {body}"
        );
    }
    // Tiresias and QSSF order the queue through priorities: the smaller job first for QSSF.
    let (_, body) = api.schedule(&two_jobs()).await;
    let prio = |id: u64| {
        body["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["job_id"] == id)
            .unwrap()["priority"]
            .as_u64()
            .unwrap()
    };
    assert!(prio(8) > prio(7), "{body}");
    let (status, body) = api
        .admin(
            Method::PUT,
            "/v1/policy",
            r#"{"mode":"enforce","policy":{"name":"tiresias","params":{"thresholds_gpu_h":[8,2]}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("ascending"), "{body}");
}

#[tokio::test]
async fn qos_classes_are_set_through_the_policy_and_bad_ones_refused_with_the_reason() {
    let api = Api::new("qos-classes");
    let good = r#"{"policy":{"name":"cinch","params":{"qos_classes":[
        {"name":"interactive","qos":["debug"],"start_within":"15:00"},
        {"name":"paper","partitions":["gpu"],"finish_by":"2026-12-01T00:00:00Z"}]}}}"#;
    let (status, set) = api.admin(Method::PATCH, "/v1/policy", good).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let classes = &set["settings"]["policy"]["params"]["qos_classes"];
    assert_eq!(classes[0]["start_within"], "15:00");
    assert_eq!(classes[1]["finish_by"], "2026-12-01T00:00:00Z");
    for (body, message) in [
        (
            r#"{"policy":{"name":"cinch","params":{"qos_classes":[{"name":"x","qos":["q"],"turnaround":"2h"}]}}}"#,
            "QoS class 'x' turnaround: '2h' is not a Slurm duration",
        ),
        (
            r#"{"policy":{"name":"cinch","params":{"qos_classes":[{"name":"x","start_within":"5"}]}}}"#,
            "would match no job",
        ),
        (
            r#"{"policy":{"name":"cinch","params":{"qos_classes":[{"name":"x","qos":["q"],"start_within":"5","when":1}]}}}"#,
            "unknown field `when`",
        ),
    ] {
        let (status, answer) = api.admin(Method::PATCH, "/v1/policy", body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {answer}");
        assert!(
            answer["message"].as_str().unwrap().contains(message),
            "{body}: {answer}"
        );
    }
    let (_, now) = api.admin(Method::GET, "/v1/policy", "").await;
    assert_eq!(now, set, "refused classes changed nothing");
}

#[tokio::test]
async fn the_record_of_the_recent_past_keeps_what_snapshots_showed_and_survives_a_restart() {
    let api = Api::new("record");
    let (status, _) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK);
    // A snapshot the service refuses teaches the record nothing.
    let (status, _) = api.schedule("{\"schema_version\":1,\"time\":-1}").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let mut later: Value = serde_json::from_str(&two_jobs()).unwrap();
    later["time"] = json!(later["time"].as_i64().unwrap() + 60);
    later["pending"].as_array_mut().unwrap().remove(0);
    let (status, _) = api.schedule(&later.to_string()).await;
    assert_eq!(status, StatusCode::OK);
    let store = api.state.record.as_ref().expect("on by default");
    let jobs: Vec<(u32, String, Option<i64>)> = store
        .record
        .lock()
        .unwrap()
        .jobs()
        .iter()
        .map(|j| {
            (
                j.job_id,
                j.user.clone(),
                j.left.map(|t| t - later["time"].as_i64().unwrap()),
            )
        })
        .collect();
    assert_eq!(
        jobs,
        vec![(7, "ann".into(), Some(0)), (8, "bob".into(), None)]
    );
    assert_eq!(store.save().unwrap(), 2);
    let before = store.record.lock().unwrap().clone();
    let dir = api.dir.clone();
    let restarted = Api::open(dir, ServeOptions::default());
    let after = restarted
        .state
        .record
        .as_ref()
        .unwrap()
        .record
        .lock()
        .unwrap()
        .clone();
    assert_eq!(after, before);
    drop(api);
    let off = Api::with(
        "record-off",
        ServeOptions {
            record_hours: Some(0),
            ..ServeOptions::default()
        },
    );
    assert!(off.state.record.is_none());
    let (status, _) = off.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!off.dir.join("record.jsonl").exists());
    // Without a record the portfolio has nothing to replay: refused, nothing changed.
    let (status, body) = off
        .admin(
            Method::PATCH,
            "/v1/policy",
            r#"{"policy": {"name": "portfolio"}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("record_hours = 0"), "{body}");
    let (_, now) = off.admin(Method::GET, "/v1/policy", "").await;
    assert_eq!(now["version"], 1);
}

#[tokio::test]
async fn the_portfolio_switches_to_the_member_that_served_the_recorded_past_best() {
    let dir = std::env::temp_dir().join(format!("cinch-api-portfolio-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let now = cinch_service::unix_now();
    // An 8-GPU job that opted in held up 20 one-GPU jobs for most of the last hour: Tiresias,
    // which requeues it for them, serves that hour best; cinch, which displaces a multi-GPU
    // job only for multi-GPU jobs, does not.
    std::fs::write(
        dir.join("record.jsonl"),
        cinch_core::testing::record_where_a_long_job_held_up_short_ones(now),
    )
    .unwrap();
    let api = Api::open(dir, ServeOptions::default());
    // Not the policy in force: nothing to evaluate.
    let (status, body) = api.admin(Method::POST, "/v1/portfolio/evaluate", "").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("not portfolio"),
        "{body}"
    );
    let (status, body) = api
        .admin(
            Method::PATCH,
            "/v1/policy",
            r#"{"policy": {"name": "portfolio", "params": {"members": ["cinch", "tiresias", "slurm"], "window_h": 1}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, view) = api.admin(Method::GET, "/v1/portfolio", "").await;
    assert_eq!(view["enabled"], true);
    assert!(view["evaluations"].as_array().unwrap().is_empty());
    let (status, evaluation) = api.admin(Method::POST, "/v1/portfolio/evaluate", "").await;
    assert_eq!(status, StatusCode::OK, "{evaluation}");
    assert_eq!(evaluation["before"], "cinch");
    assert_eq!(evaluation["after"], "tiresias", "{evaluation}");
    assert!(
        evaluation["why"].as_str().unwrap().contains("switched"),
        "{evaluation}"
    );
    let mean = |member: &str| {
        evaluation["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["member"] == member)
            .unwrap()["mean_h"]
            .as_f64()
            .unwrap()
    };
    assert!(mean("tiresias") < 0.5 * mean("cinch"), "{evaluation}");
    assert_eq!(evaluation["results"][0]["jobs"], 21);
    // No agent had reported its round: replayed at cinch.conf's defaults, and said.
    assert_eq!(
        evaluation["replayed_with"],
        "IntervalSeconds=5 MaxRequeuesPerJob=10 MaxRequeuesPerHour=60 (cinch.conf's defaults: \
         no agent has reported its settings)",
        "{evaluation}"
    );
    let (_, view) = api.admin(Method::GET, "/v1/portfolio", "").await;
    assert_eq!(view["in_force"], "tiresias");
    assert_eq!(view["evaluations"].as_array().unwrap().len(), 1);
    // The member in force decides, and the decisions say so.
    let (status, answer) = api.schedule(&two_jobs()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["policy"], "portfolio/tiresias", "{answer}");
    let (_, metrics) = api.call(Method::GET, "/metrics", None, "").await;
    let metrics = metrics.as_str().unwrap().to_string();
    for line in [
        "cinch_portfolio_evaluations_total{outcome=\"switched\"} 1",
        "cinch_portfolio_member_in_force{member=\"tiresias\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    // The dashboard's portfolio panels query what a portfolio exports.
    let queried =
        assert_dashboard_queries_exported(&metrics, |name| name.starts_with("cinch_portfolio_"));
    assert_eq!(queried, 3);
    // A restart keeps the member in force, since when, and the evaluations (portfolio.json,
    // 0600); the next evaluation is due a period after the last, not at once.
    let file = api.dir.join("portfolio.json");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let dir = api.dir.clone();
    let restarted = Api::open(dir, ServeOptions::default());
    std::mem::forget(api); // the restarted service owns the directory now
    let api = restarted;
    let (_, again) = api.admin(Method::GET, "/v1/portfolio", "").await;
    assert_eq!(again["in_force"], "tiresias", "{again}");
    assert_eq!(again["since"], view["since"], "{again}");
    assert_eq!(again["evaluations"], view["evaluations"], "{again}");
    let (_, answer) = api.schedule(&two_jobs()).await;
    assert_eq!(answer["policy"], "portfolio/tiresias", "{answer}");
    assert!(
        cinch_service::portfolio::evaluate_if_due(&api.state, now + 60, false)
            .unwrap()
            .is_none(),
        "not due again within the hour"
    );
    // A change of members starts over from the first.
    api.patch_policy(r#"{"policy": {"name": "portfolio", "params": {"members": ["qssf", "tiresias"], "window_h": 1}}}"#).await;
    // An agent that reports its round (cinch.conf's cadence and requeue bounds): the next
    // evaluation replays with them.
    let mut snap: Value = serde_json::from_str(&two_jobs()).unwrap();
    snap["agent"] = json!({"mode": "enforce", "breaker_open": false, "last_round_s": 0.01,
        "failed_rounds": 0,
        "round": {"interval_s": 7, "max_requeues_per_job": 3, "max_requeues_per_hour": 20}});
    let (_, answer) = api.schedule(&snap.to_string()).await;
    assert_eq!(answer["policy"], "portfolio/qssf", "{answer}");
    let evaluation = cinch_service::portfolio::evaluate_if_due(&api.state, now + 60, true)
        .unwrap()
        .expect("forced");
    assert_eq!(
        evaluation.replayed_with,
        "IntervalSeconds=7 MaxRequeuesPerJob=3 MaxRequeuesPerHour=20 (the agent's cinch.conf)"
    );
    // A state file that cannot be read stops the start and is left as it was.
    std::fs::write(&file, "{\"format\": 1, \"params\"").unwrap();
    let config = ServeConfig::resolve(ServeOptions {
        state_dir: Some(api.dir.clone()),
        ..ServeOptions::default()
    })
    .unwrap();
    let err = build_state(&config).err().expect("refused").to_string();
    assert!(
        err.contains("portfolio.json is not a valid cinch portfolio state")
            && err.contains("move it away"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{\"format\": 1, \"params\""
    );
    std::fs::remove_file(&file).unwrap();
    // A window longer than the record keeps (72 h by default) is refused.
    let (status, body) = api
        .admin(
            Method::PATCH,
            "/v1/policy",
            r#"{"policy": {"params": {"window_h": 100}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body.to_string()
            .contains("longer than the record keeps (72 h"),
        "{body}"
    );
    // Members that are not policies are refused, and change nothing.
    let (status, body) = api
        .admin(
            Method::PATCH,
            "/v1/policy",
            r#"{"policy": {"name": "portfolio", "params": {"members": ["portfolio"]}}}"#,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body.to_string().contains("cannot be a member"), "{body}");
}

/// A snapshot of 4 nodes of 4 GPUs in two racks: jobs 1 and 2 hold 3 GPUs on n1 and n2, job 3
/// (ann's) 2 on n3, all with limits that say 5,010 s; ann's bert job waits for 8 GPUs in one rack.
fn a_job_waits_for_its_shape() -> cinch_core::wire::snapshot::Snapshot {
    use cinch_core::testing::node;
    use cinch_core::wire::snapshot::RunningJob;
    let mut bert = pending(4, 8);
    bert.user = "ann".into();
    bert.hints.insert("app".into(), "bert".into());
    bert.time_limit_min = Some(34);
    let mut snap = snapshot(
        vec![
            node("n1", 4, 3, "r1"),
            node("n2", 4, 3, "r1"),
            node("n3", 4, 2, "r2"),
            node("n4", 4, 0, "r2"),
        ],
        vec![bert],
    );
    snap.pending[0].submit_time = snap.time;
    snap.running = [(1, "n1", 3), (2, "n2", 3), (3, "n3", 2)]
        .into_iter()
        .map(|(id, node, gpus)| RunningJob {
            job_id: id,
            user: "ann".into(),
            name: Some(format!("r{id}")),
            nodes: vec![node.into()],
            gpus,
            start_time: snap.time - 10,
            time_limit_min: Some(167),
            ..RunningJob::default()
        })
        .collect();
    snap
}

/// The watcher's report on a running job: only from its user (MUNGE) or the admin, only for a
/// running job, only readings that make sense; once taken, `cinch` with `progress=true` plans
/// with it (the bert job is pinned where job 3's progress says GPUs free, not where limits say).
#[tokio::test]
async fn a_watchers_progress_report_is_taken_from_the_jobs_user_and_planned_with() {
    let bin = std::env::temp_dir().join(format!("cinch-api-progress-bin-{}", std::process::id()));
    let api = Api::with(
        "progress",
        ServeOptions {
            unmunge: Some(fake_unmunge(&bin)),
            ..ServeOptions::default()
        },
    );
    api.patch_policy(r#"{"policy":{"name":"cinch","params":{"progress":true}}}"#)
        .await;
    let report = |credential: Option<&str>, job: u32, body: String| {
        let mut request = Request::post(format!("/v1/jobs/{job}/progress"));
        if let Some(c) = credential {
            request = request.header(header::AUTHORIZATION, format!("Munge {c}"));
        }
        let request = request.body(Body::from(body)).unwrap();
        let router = api.router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // 600 of 1,000 steps, 100 in the last 100 s: 400 s left.
    let reading = |at: i64| {
        json!({"progress": {"total": 1000, "done": 600, "at": at, "since_done": 500, "since": at - 100}})
            .to_string()
    };
    // Nothing runs yet.
    let (status, body) = report(Some("ann:1000:cinch-progress 3"), 3, reading(now)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let snap = a_job_waits_for_its_shape();
    let pins = |body: &Value| body["decisions"][0]["pin_nodes"].clone();
    let (status, body) = api.schedule(&serde_json::to_string(&snap).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(pins(&body), json!(["n1", "n2"]), "by the limits: {body}");
    // No credential; another user's; one made for another job; a reading that makes no sense.
    let (status, _) = report(None, 3, reading(now)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = report(Some("bob:1001:cinch-progress 3"), 3, reading(now)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = report(Some("ann:1000:cinch-why 3"), 3, reading(now)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = report(Some("ann:1000:cinch-progress 3"), 3, reading(now - 7_200)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (status, body) = report(Some("ann:1000:cinch-progress 3"), 3, "{\"done\": 1}".into()).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let (_, body) = api.schedule(&serde_json::to_string(&snap).unwrap()).await;
    assert_eq!(pins(&body), json!(["n1", "n2"]), "nothing taken: {body}");
    // ann's watcher on her job 3: taken, and the next round plans with it.
    let (status, body) = report(Some("ann:1000:cinch-progress 3"), 3, reading(now)).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (_, body) = api.schedule(&serde_json::to_string(&snap).unwrap()).await;
    assert_eq!(
        pins(&body),
        json!(["n3", "n4"]),
        "by job 3's progress: {body}"
    );
    // `cinch why` reads it back: ann (her why credential) and the admin; bob learns nothing.
    let ask = |credential: &str| {
        let request = Request::get("/v1/jobs/3/progress")
            .header(header::AUTHORIZATION, format!("Munge {credential}"))
            .body(Body::empty())
            .unwrap();
        let router = api.router.clone();
        async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        }
    };
    let (status, body) = ask("ann:1000:cinch-why 3").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["user"], "ann");
    assert_eq!(body["progress"]["done"], 600);
    let left = body["left_s"].as_i64().unwrap();
    assert!((390..=400).contains(&left), "{body}");
    let (status, body) = ask("bob:1001:cinch-why 3").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = api.admin(Method::GET, "/v1/jobs/3/progress", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = api.admin(Method::GET, "/v1/jobs/2/progress", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no reading of job 2");
    let _ = std::fs::remove_dir_all(&bin);
}
