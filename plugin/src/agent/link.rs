//! The agent's end of the exchange with the optimizer: in deltas (only what changed since the
//! optimizer's last answer, `cinch_core::wire::exchange`) where the optimizer has them, whole snapshots
//! where it does not (a cinch from before them answers 404). HTTP is behind [`Transport`], so the
//! rules (fall back, start afresh after a failure, send the whole snapshot when the optimizer no
//! longer keeps the base) are unit-tested against the service's own end.

use std::time::{Duration, Instant};

use cinch_core::enact::round::AskError;
use cinch_core::wire::exchange::{DecisionsDelta, Sender, DELTA_PATH};
use cinch_core::{Decisions, Snapshot, SCHEMA_VERSION};

use super::http::Response;
use crate::config::LogLevel;

/// How long the agent sends whole snapshots to an optimizer without the delta exchange before
/// trying it again (the optimizer may be upgraded meanwhile).
pub const DELTA_RETRY: Duration = Duration::from_secs(600);

/// The whole exchange's path.
pub const WHOLE_PATH: &str = "/v1/schedule";

/// How the link reaches the optimizer.
pub trait Transport {
    /// Posts `body` (JSON) to `path`; `Err` when no HTTP answer came.
    fn post(&mut self, path: &str, body: &[u8]) -> Result<Response, String>;
    fn log(&mut self, level: LogLevel, message: &str);
}

/// What the agent keeps of its exchanges with the optimizer.
#[derive(Debug, Default)]
pub struct Link {
    sender: Sender,
    /// While the optimizer has no delta exchange, until when to send whole snapshots.
    whole_only_until: Option<Instant>,
    /// What the last exchange carried, for the round's log line.
    pub note: String,
}

impl Link {
    /// One exchange at `now`: the optimizer's whole answer to `snapshot`, `Err` with why there
    /// is no usable one.
    pub fn exchange(
        &mut self,
        transport: &mut impl Transport,
        snapshot: &Snapshot,
        now: Instant,
    ) -> Result<Decisions, AskError> {
        if self.whole_only_until.is_none_or(|until| now >= until) {
            match self.exchange_delta(transport, snapshot) {
                Ok(Some(decisions)) => {
                    if self.whole_only_until.take().is_some() {
                        transport.log(
                            LogLevel::Info,
                            "agent: the optimizer has the delta exchange now; sending what changed",
                        );
                    }
                    return Ok(decisions);
                }
                Ok(None) => {
                    if self.whole_only_until.is_none() {
                        transport.log(
                            LogLevel::Info,
                            &format!(
                                "agent: the optimizer has no delta exchange (answered 404 to \
                                 {DELTA_PATH}: a cinch from before it); sending whole snapshots, \
                                 trying again every {} s",
                                DELTA_RETRY.as_secs()
                            ),
                        );
                    }
                    self.whole_only_until = Some(now + DELTA_RETRY);
                }
                Err(e) => {
                    // Whatever the optimizer kept, the whole snapshot is right next time.
                    self.sender.forget();
                    return Err(e);
                }
            }
        }
        // (An answer to a whole snapshot is no base for a delta.)
        self.sender.forget();
        self.note = "; sent the whole snapshot".to_string();
        let response = post(transport, WHOLE_PATH, &encode(snapshot)?)?;
        answer_of(&response)
    }

    /// Takes back the answer [`Link::exchange`] gave, once the round is done with it: the next
    /// delta builds on it (without it, the next delta is the whole snapshot).
    pub fn give_back(&mut self, answer: Decisions) {
        self.sender.give_back(answer);
    }

    /// One `POST /v1/schedule/delta`, or two when the optimizer no longer keeps the base (the
    /// whole snapshot then goes as a delta on nothing). `Ok(None)`: no such endpoint.
    fn exchange_delta(
        &mut self,
        transport: &mut impl Transport,
        snapshot: &Snapshot,
    ) -> Result<Option<Decisions>, AskError> {
        let mut outgoing = self.sender.delta(snapshot);
        let mut response = post(transport, DELTA_PATH, &encode(&outgoing.delta)?)?;
        if response.status == 409 && outgoing.delta.base.is_some() {
            transport.log(
                LogLevel::Verbose,
                "agent: the optimizer no longer keeps the last exchange; sending the whole snapshot",
            );
            self.sender.forget();
            outgoing = self.sender.delta(snapshot);
            response = post(transport, DELTA_PATH, &encode(&outgoing.delta)?)?;
        }
        if response.status == 404 {
            return Ok(None);
        }
        let answer: DecisionsDelta = answer_of(&response)?;
        let sent = &outgoing.delta;
        self.note = format!(
            "; sent {}/{} pending, {}/{} running{}, {}/{} decisions back",
            sent.pending.changed.len(),
            sent.pending.order.len(),
            sent.running.changed.len(),
            sent.running.order.len(),
            if sent.nodes.is_some() { ", nodes" } else { "" },
            answer.changed.len(),
            answer.order.len()
        );
        self.sender
            .receive(outgoing, answer)
            .map(Some)
            .map_err(|e| {
                AskError::Invalid(format!(
                    "optimizer answered a delta that does not fit the request: {e}"
                ))
            })
    }
}

/// One post: no HTTP answer at all is an unreachable optimizer.
fn post(transport: &mut impl Transport, path: &str, body: &[u8]) -> Result<Response, AskError> {
    transport.post(path, body).map_err(AskError::Unreachable)
}

fn encode(body: &impl serde::Serialize) -> Result<Vec<u8>, AskError> {
    // (A snapshot always encodes; were it not to, no answer could be had either.)
    serde_json::to_vec(body).map_err(|e| AskError::Invalid(format!("cannot encode snapshot: {e}")))
}

/// An answer of this schema version, decoded.
trait Answer: serde::de::DeserializeOwned {
    fn schema_version(&self) -> u32;
}

impl Answer for Decisions {
    fn schema_version(&self) -> u32 {
        self.schema_version
    }
}

impl Answer for DecisionsDelta {
    fn schema_version(&self) -> u32 {
        self.schema_version
    }
}

/// The answer a response carries: a 200 with JSON of this schema version.
fn answer_of<A: Answer>(response: &Response) -> Result<A, AskError> {
    if response.status != 200 {
        let text = String::from_utf8_lossy(&response.body);
        return Err(AskError::Refused(format!(
            "optimizer answered HTTP {}: {}",
            response.status,
            text.chars().take(300).collect::<String>()
        )));
    }
    let answer: A = serde_json::from_slice(&response.body)
        .map_err(|e| AskError::Invalid(format!("optimizer answered malformed decisions: {e}")))?;
    if answer.schema_version() != SCHEMA_VERSION {
        return Err(AskError::Invalid(format!(
            "optimizer speaks schema_version {}, cinch {SCHEMA_VERSION}",
            answer.schema_version()
        )));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cinch_core::testing::{cluster, pending, snapshot};
    use cinch_core::wire::exchange::{Receiver, SnapshotDelta};
    use cinch_core::{Decision, Mode};

    /// The optimizer's end as the service has it (its `Receiver`), deciding one explanation per
    /// pending job; or an optimizer from before the delta exchange; every request recorded.
    struct Optimizer {
        receiver: Receiver,
        has_deltas: bool,
        /// Each request's path and, for deltas, its base and the pending jobs it carried.
        requests: Vec<(String, Option<u64>, usize)>,
        logs: Vec<String>,
        /// The next answer's body instead of the real one.
        garbage: Option<&'static str>,
    }

    impl Optimizer {
        fn new(has_deltas: bool) -> Optimizer {
            Optimizer {
                receiver: Receiver::new(100),
                has_deltas,
                requests: Vec::new(),
                logs: Vec::new(),
                garbage: None,
            }
        }
    }

    fn decide(snapshot: &Snapshot) -> Decisions {
        Decisions {
            observed: Default::default(),
            schema_version: SCHEMA_VERSION,
            policy: "test".into(),
            mode: Mode::Enforce,
            time: snapshot.time,
            stated_targets: None,
            decisions: snapshot
                .pending
                .iter()
                .map(|j| Decision::explain(j.job_id, format!("waits at {}", j.priority), 300))
                .collect(),
        }
    }

    fn ok(body: Vec<u8>) -> Result<Response, String> {
        Ok(Response { status: 200, body })
    }

    impl Transport for Optimizer {
        fn post(&mut self, path: &str, body: &[u8]) -> Result<Response, String> {
            if let Some(garbage) = self.garbage.take() {
                self.requests.push((path.to_string(), None, 0));
                return ok(garbage.as_bytes().to_vec());
            }
            if path == WHOLE_PATH {
                let snapshot: Snapshot = serde_json::from_slice(body).unwrap();
                self.requests
                    .push((path.into(), None, snapshot.pending.len()));
                return ok(serde_json::to_vec(&decide(&snapshot)).unwrap());
            }
            let delta: SnapshotDelta = serde_json::from_slice(body).unwrap();
            self.requests
                .push((path.into(), delta.base, delta.pending.changed.len()));
            if !self.has_deltas {
                return Ok(Response {
                    status: 404,
                    body: Vec::new(),
                });
            }
            let base = delta.base;
            match self.receiver.snapshot(delta) {
                Ok(snapshot) => {
                    let answer = self.receiver.answer(base, &snapshot, &decide(&snapshot));
                    ok(serde_json::to_vec(&answer).unwrap())
                }
                Err(e) => Ok(Response {
                    status: 409,
                    body: e.to_string().into_bytes(),
                }),
            }
        }

        fn log(&mut self, _level: LogLevel, message: &str) {
            self.logs.push(message.to_string());
        }
    }

    /// One round's exchange: the answer, handed back as the round does once done with it.
    fn ask(
        link: &mut Link,
        optimizer: &mut Optimizer,
        snap: &Snapshot,
        now: Instant,
    ) -> Result<Decisions, AskError> {
        let answer = link.exchange(optimizer, snap, now)?;
        link.give_back(answer.clone());
        Ok(answer)
    }

    fn queue(jobs: u32) -> Snapshot {
        snapshot(
            cluster(2, 8, 1),
            (1..=jobs).map(|id| pending(id, 1)).collect(),
        )
    }

    #[test]
    fn after_the_first_exchange_only_what_changed_is_sent_and_answers_are_whole() {
        let mut link = Link::default();
        let mut optimizer = Optimizer::new(true);
        let now = Instant::now();
        let mut snap = queue(5);
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        snap.time += 60;
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(
            link.note,
            "; sent 0/5 pending, 0/0 running, 0/5 decisions back"
        );
        snap.pending[2].priority = 7;
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(
            link.note,
            "; sent 1/5 pending, 0/0 running, 1/5 decisions back"
        );
        assert_eq!(
            optimizer.requests,
            [
                (DELTA_PATH.into(), None, 5),
                (DELTA_PATH.into(), Some(100), 0),
                (DELTA_PATH.into(), Some(101), 1)
            ]
        );
    }

    #[test]
    fn an_answer_the_round_did_not_give_back_is_no_base() {
        let mut link = Link::default();
        let mut optimizer = Optimizer::new(true);
        let now = Instant::now();
        let snap = queue(3);
        link.exchange(&mut optimizer, &snap, now).unwrap();
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(optimizer.requests[1], (DELTA_PATH.into(), None, 3));
    }

    #[test]
    fn a_restarted_optimizer_gets_the_whole_snapshot_in_the_same_round() {
        let mut link = Link::default();
        let mut optimizer = Optimizer::new(true);
        let now = Instant::now();
        let snap = queue(3);
        ask(&mut link, &mut optimizer, &snap, now).unwrap();
        optimizer.receiver = Receiver::new(500);
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(
            optimizer.requests[1..],
            [
                (DELTA_PATH.into(), Some(100), 0),
                (DELTA_PATH.into(), None, 3)
            ]
        );
        assert!(optimizer.logs[0].contains("no longer keeps the last exchange"));
        // And builds on the new optimizer's exchange from then on.
        ask(&mut link, &mut optimizer, &snap, now).unwrap();
        assert_eq!(optimizer.requests[3], (DELTA_PATH.into(), Some(500), 0));
    }

    #[test]
    fn an_optimizer_without_deltas_gets_whole_snapshots_and_is_tried_again_later() {
        let mut link = Link::default();
        let mut optimizer = Optimizer::new(false);
        let now = Instant::now();
        let snap = queue(2);
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        let paths: Vec<&str> = optimizer.requests.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(paths, [DELTA_PATH, WHOLE_PATH, WHOLE_PATH]);
        assert_eq!(optimizer.logs.len(), 1, "{:?}", optimizer.logs);
        assert!(optimizer.logs[0].contains("no delta exchange (answered 404"));
        // Upgraded meanwhile: tried again after DELTA_RETRY, and used.
        optimizer.has_deltas = true;
        let later = now + DELTA_RETRY;
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, later),
            Ok(decide(&snap))
        );
        assert_eq!(optimizer.requests[3], (DELTA_PATH.into(), None, 2));
        assert!(optimizer.logs[1].contains("has the delta exchange now"));
    }

    #[test]
    fn no_answer_is_unreachable_and_an_error_status_is_refused() {
        /// A transport that fails as told: no answer, or this status and body.
        struct Failing(Option<(u16, &'static str)>);
        impl Transport for Failing {
            fn post(&mut self, _: &str, _: &[u8]) -> Result<Response, String> {
                match self.0 {
                    None => Err("connection refused".into()),
                    Some((status, body)) => Ok(Response {
                        status,
                        body: body.as_bytes().to_vec(),
                    }),
                }
            }
            fn log(&mut self, _: LogLevel, _: &str) {}
        }
        let snap = queue(1);
        let now = Instant::now();
        let mut down = Failing(None);
        assert_eq!(
            Link::default().exchange(&mut down, &snap, now),
            Err(AskError::Unreachable("connection refused".into()))
        );
        let mut refusing = Failing(Some((401, "wrong token for this endpoint")));
        assert_eq!(
            Link::default().exchange(&mut refusing, &snap, now),
            Err(AskError::Refused(
                "optimizer answered HTTP 401: wrong token for this endpoint".into()
            ))
        );
    }

    #[test]
    fn a_failed_exchange_is_an_error_and_the_next_starts_from_the_whole_snapshot() {
        let mut link = Link::default();
        let mut optimizer = Optimizer::new(true);
        let now = Instant::now();
        let snap = queue(2);
        ask(&mut link, &mut optimizer, &snap, now).unwrap();
        optimizer.garbage = Some("{\"schema_version\": 1}");
        let err = ask(&mut link, &mut optimizer, &snap, now).unwrap_err();
        assert!(
            matches!(&err, AskError::Invalid(why) if why.contains("malformed decisions")),
            "{err:?}"
        );
        optimizer.garbage = Some(
            "{\"schema_version\":9,\"exchange\":1,\"policy\":\"p\",\"mode\":\"enforce\",\
             \"time\":0,\"order\":[]}",
        );
        let err = ask(&mut link, &mut optimizer, &snap, now).unwrap_err();
        assert!(
            matches!(&err, AskError::Invalid(why) if why.contains("schema_version 9")),
            "{err:?}"
        );
        assert_eq!(
            ask(&mut link, &mut optimizer, &snap, now),
            Ok(decide(&snap))
        );
        assert_eq!(optimizer.requests[3], (DELTA_PATH.into(), None, 2));
        // An answer that names a decision it never sent.
        optimizer.garbage = Some(
            "{\"schema_version\":1,\"exchange\":1,\"base\":101,\"policy\":\"p\",\
             \"mode\":\"enforce\",\"time\":0,\"order\":[42]}",
        );
        let err = ask(&mut link, &mut optimizer, &snap, now).unwrap_err();
        assert!(
            matches!(&err, AskError::Invalid(why) if why.contains("does not fit the request")),
            "{err:?}"
        );
    }
}
