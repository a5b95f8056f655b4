//! From what Slurm reports and what the optimizer decided, the job updates to make: apply new
//! decisions, leave unchanged ones alone, and undo cinch's own changes when their TTL runs out,
//! when the optimizer is lost, or in any mode but `enforce`. Pure: the agent thread feeds it and
//! carries out its updates through `slurm_update_job`.
//!
//! What cinch applied to a job is written into the job's AdminComment as a `cinch-decision:`
//! segment (see docs/operations.md). That makes it visible to users in `scontrol show job`, and
//! durable: after a slurmctld restart the agent knows what it owns and can undo it.
//!
//! cinch never touches what a user or admin set: jobs with their own node list, `--begin`,
//! priority or nice keep them, and a field someone else changes after cinch is theirs from then on
//! (`job_modify` reports such changes as [`Fields`]).

use std::collections::{HashMap, HashSet};

use cinch_core::{Decision, Mode};

use super::view::{JobState, JobView};
use crate::record::{replace_segment, segment, RECORD_PREFIX};

/// Prefix of the AdminComment segment recording what cinch applied.
pub const DECISION_PREFIX: &str = "cinch-decision:";
/// Submit-time hold marker inside the `cinch:` record (written by job_submit).
pub const HOLD_KEY: &str = "hold_until=";

/// Longest delay and TTL cinch will apply, whatever the optimizer says.
pub const MAX_DELAY_S: i64 = 7 * 86_400;
pub const MAX_TTL_S: u32 = 7 * 86_400;
/// Slurm's nice range (NICE_OFFSET - 3 either way).
pub const MAX_NICE: i64 = 2_147_483_645;
/// Slurm's "recompute the priority" value (INFINITE), as `scontrol release` sends it.
pub const PRIORITY_AUTOMATIC: u32 = u32::MAX;

/// Job settings someone other than cinch changed (bit set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fields(pub u8);

impl Fields {
    pub const NODES: Fields = Fields(1);
    pub const BEGIN: Fields = Fields(2);
    pub const PRIORITY: Fields = Fields(4);
    pub const NICE: Fields = Fields(8);

    pub fn contains(self, other: Fields) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Fields) -> Fields {
        Fields(self.0 | other.0)
    }
}

/// What cinch has applied to one job, as recorded in its AdminComment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    pub pin: Option<Vec<String>>,
    /// The job's node count before cinch pinned it, restored on undo.
    pub nodes_was: Option<u32>,
    pub begin: Option<i64>,
    pub hold: bool,
    pub prio: Option<u32>,
    /// (the job's nice before cinch, the nice cinch set)
    pub nice: Option<(i64, i64)>,
    pub until: i64,
    pub why: String,
}

impl Applied {
    pub fn is_empty(&self) -> bool {
        self.pin.is_none()
            && self.begin.is_none()
            && !self.hold
            && self.prio.is_none()
            && self.nice.is_none()
    }

    /// The segment text: `cinch-decision: pin=n1,n2 nodes_was=1 ... until=T why=...`.
    pub fn format(&self) -> String {
        let mut out = String::from(DECISION_PREFIX);
        if let Some(pin) = &self.pin {
            out.push_str(&format!(" pin={}", pin.join(",")));
        }
        if let Some(n) = self.nodes_was {
            out.push_str(&format!(" nodes_was={n}"));
        }
        if let Some(t) = self.begin {
            out.push_str(&format!(" begin={t}"));
        }
        if self.hold {
            out.push_str(" hold=1");
        }
        if let Some(p) = self.prio {
            out.push_str(&format!(" prio={p}"));
        }
        if let Some((was, ours)) = self.nice {
            out.push_str(&format!(" nice_was={was} nice={ours}"));
        }
        // The reason goes last and may hold spaces; '|' would split the AdminComment.
        let why = self.why.replace('|', "/").replace(['\n', '\r'], " ");
        out.push_str(&format!(" until={} why={}", self.until, why));
        out
    }

    pub fn parse(segment: &str) -> Option<Applied> {
        let rest = segment.strip_prefix(DECISION_PREFIX)?;
        let (fields, why) = match rest.find(" why=") {
            Some(i) => (&rest[..i], rest[i + 5..].trim().to_string()),
            None => (rest, String::new()),
        };
        let mut applied = Applied {
            why,
            ..Applied::default()
        };
        let mut nice_was = None;
        let mut nice = None;
        for pair in fields.split_whitespace() {
            let (key, value) = pair.split_once('=')?;
            match key {
                "pin" => applied.pin = Some(value.split(',').map(str::to_string).collect()),
                "nodes_was" => applied.nodes_was = Some(value.parse().ok()?),
                "begin" => applied.begin = Some(value.parse().ok()?),
                "hold" => applied.hold = value == "1",
                "prio" => applied.prio = Some(value.parse().ok()?),
                "nice_was" => nice_was = Some(value.parse().ok()?),
                "nice" => nice = Some(value.parse().ok()?),
                "until" => applied.until = value.parse().ok()?,
                _ => {} // written by a newer cinch: ignore
            }
        }
        applied.nice = nice_was.zip(nice);
        Some(applied)
    }
}

/// The submit-time hold job_submit placed, if the job still carries it.
pub fn submit_hold(job: &JobView) -> Option<i64> {
    segment(job.admin_comment.as_deref(), RECORD_PREFIX)?
        .split_whitespace()
        .find_map(|w| w.strip_prefix(HOLD_KEY))
        .and_then(|t| t.parse().ok())
}

/// One `slurm_update_job` call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobUpdate {
    pub job_id: u32,
    /// `Some("")` clears the node list.
    pub req_nodes: Option<String>,
    pub min_nodes: Option<u32>,
    pub begin_time: Option<i64>,
    /// 0 holds; [`PRIORITY_AUTOMATIC`] releases / recomputes.
    pub priority: Option<u32>,
    /// In user terms.
    pub nice: Option<i64>,
    pub admin_comment: Option<String>,
    /// For the log: what and why.
    pub summary: String,
}

pub struct Input<'a> {
    pub now: i64,
    /// The mode in force (the stricter of cinch.conf's and the optimizer's).
    pub mode: Mode,
    /// `None` when there is no usable answer from the optimizer: cinch stands aside.
    pub decisions: Option<&'a [Decision]>,
    pub nodes: &'a HashSet<String>,
    /// Fields of each job that a user or admin changed.
    pub foreign: &'a HashMap<u32, Fields>,
    /// TTLs renewed in memory since the AdminComment was written.
    pub renewed: &'a HashMap<u32, i64>,
}

#[derive(Debug, Default)]
pub struct Output {
    pub updates: Vec<JobUpdate>,
    /// New in-memory TTL renewals (job -> until).
    pub renewed: HashMap<u32, i64>,
    /// Decisions refused as invalid, with why.
    pub refused: Vec<String>,
    /// Decisions not applied because the mode is shadow (for the log).
    pub shadow: Vec<(u32, String)>,
    /// Running jobs to requeue (`scontrol requeue`), with why.
    pub requeues: Vec<(u32, String)>,
}

/// What a decision asks for, once validated. `Default`: nothing (undo whatever cinch applied).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Target {
    pin: Option<Vec<String>>,
    node_count: Option<u32>,
    begin: Option<i64>,
    hold: bool,
    prio: Option<u32>,
    nice: Option<i64>,
    ttl: u32,
    why: String,
}

impl Target {
    fn has_action(&self) -> bool {
        self.pin.is_some()
            || self.begin.is_some()
            || self.hold
            || self.prio.is_some()
            || self.nice.is_some()
    }

    /// What cinch already applied, for `remaining` more seconds.
    fn keep(applied: &Applied, remaining: i64) -> Target {
        Target {
            pin: applied.pin.clone(),
            node_count: applied.pin.as_ref().map(|p| p.len() as u32),
            begin: applied.begin,
            hold: applied.hold,
            prio: applied.prio,
            nice: applied.nice.map(|(_, n)| n),
            ttl: remaining.clamp(1, i64::from(MAX_TTL_S)) as u32,
            why: applied.why.clone(),
        }
    }
}

fn validate(d: &Decision, now: i64, nodes: &HashSet<String>) -> Result<Target, String> {
    if d.ttl_s == 0 || d.ttl_s > MAX_TTL_S {
        return Err(format!("job {}: ttl_s {} out of range", d.job_id, d.ttl_s));
    }
    if let Some(pin) = &d.pin_nodes {
        if pin.is_empty() {
            return Err(format!("job {}: empty pin_nodes", d.job_id));
        }
        if let Some(unknown) = pin.iter().find(|n| !nodes.contains(*n)) {
            return Err(format!("job {}: unknown node '{unknown}'", d.job_id));
        }
        let distinct: HashSet<&String> = pin.iter().collect();
        if distinct.len() != pin.len() {
            return Err(format!(
                "job {}: a node appears twice in pin_nodes",
                d.job_id
            ));
        }
    }
    if let Some(count) = d.node_count {
        let pinned = d.pin_nodes.as_ref().map_or(0, Vec::len) as u32;
        if count == 0 || count as usize > nodes.len() || (pinned > 0 && count != pinned) {
            return Err(format!(
                "job {}: node_count {count} is not possible",
                d.job_id
            ));
        }
    }
    if let Some(t) = d.delay_until {
        if t > now + MAX_DELAY_S {
            return Err(format!(
                "job {}: delay_until {t} is more than 7 days ahead",
                d.job_id
            ));
        }
    }
    if let Some(p) = d.priority {
        if p == 0 || p >= PRIORITY_AUTOMATIC - 1 {
            return Err(format!("job {}: priority {p} out of range", d.job_id));
        }
    }
    if let Some(n) = d.nice {
        if i64::from(n).abs() > MAX_NICE {
            return Err(format!("job {}: nice {n} out of range", d.job_id));
        }
    }
    Ok(Target {
        pin: d.pin_nodes.clone(),
        node_count: d
            .node_count
            .or(d.pin_nodes.as_ref().map(|p| p.len() as u32)),
        // A delay already in the past asks for nothing.
        begin: d.delay_until.filter(|&t| t > now),
        hold: d.hold == Some(true),
        prio: d.priority,
        nice: d.nice.map(i64::from),
        ttl: d.ttl_s,
        why: d.reason.clone(),
    })
}

/// A requeue is only for a running job that allows it, and asks for nothing else.
fn requeue_of(d: &Decision, job: Option<&JobView>) -> Result<(), String> {
    let Some(job) = job else {
        return Err(format!(
            "job {}: requeue of a job that is not running",
            d.job_id
        ));
    };
    if !job.requeue {
        return Err(format!(
            "job {}: requeue of a job submitted without --requeue",
            d.job_id
        ));
    }
    let other = Decision {
        requeue: None,
        ..d.clone()
    };
    if other.is_action() {
        return Err(format!(
            "job {}: a requeue decision must not carry other actions",
            d.job_id
        ));
    }
    Ok(())
}

pub fn reconcile(jobs: &[JobView], input: &Input) -> Output {
    let mut out = Output::default();
    let pending: HashMap<u32, &JobView> = jobs
        .iter()
        .filter(|j| j.state == JobState::Pending && !j.is_array_or_het)
        .map(|j| (j.job_id, j))
        .collect();

    let mut targets: HashMap<u32, Option<Target>> = HashMap::new();
    if let Some(decisions) = input.decisions {
        let running: HashMap<u32, &JobView> = jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .map(|j| (j.job_id, j))
            .collect();
        for d in decisions {
            if d.requeue == Some(true) {
                match requeue_of(d, running.get(&d.job_id).copied()) {
                    Ok(()) if input.mode == Mode::Enforce => {
                        out.requeues.push((d.job_id, d.reason.clone()))
                    }
                    Ok(()) if input.mode == Mode::Shadow => out
                        .shadow
                        .push((d.job_id, format!("requeue: {}", d.reason))),
                    Ok(()) => {}
                    Err(why) => out.refused.push(why),
                }
                continue;
            }
            if !pending.contains_key(&d.job_id) {
                out.refused
                    .push(format!("job {}: not a pending job", d.job_id));
                continue;
            }
            if targets.contains_key(&d.job_id) {
                out.refused
                    .push(format!("job {}: decided twice; first kept", d.job_id));
                continue;
            }
            match validate(d, input.now, input.nodes) {
                Ok(t) => {
                    targets.insert(d.job_id, Some(t));
                }
                Err(why) => out.refused.push(why),
            }
        }
    }

    let mut ids: Vec<u32> = pending.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        let job = pending[&id];
        let applied = segment(job.admin_comment.as_deref(), DECISION_PREFIX)
            .and_then(Applied::parse)
            .unwrap_or_default();
        let hold = submit_hold(job);
        let foreign = input.foreign.get(&id).copied().unwrap_or_default();
        let until = applied
            .until
            .max(input.renewed.get(&id).copied().unwrap_or(0));

        let mut target: Option<Target> = match (input.mode, input.decisions) {
            (Mode::Enforce, Some(_)) => match targets.get(&id) {
                Some(t) => t.clone(),
                // Not mentioned this round: what was applied stands until its TTL.
                // Nothing to change then, unless a submit hold still needs releasing.
                None if !applied.is_empty() && until > input.now => {
                    if hold.is_none() {
                        continue;
                    }
                    Some(Target::keep(&applied, until - input.now))
                }
                None => None,
            },
            (Mode::Shadow, Some(_)) => {
                if let Some(Some(t)) = targets.get(&id) {
                    if t.has_action() {
                        out.shadow.push((id, describe(t)));
                    }
                }
                None
            }
            _ => None,
        };
        // What the user or an admin set is theirs.
        if let Some(t) = &mut target {
            if foreign.contains(Fields::NODES) || (job.req_nodes.is_some() && applied.pin.is_none())
            {
                t.pin = None;
                t.node_count = None;
            }
            if foreign.contains(Fields::BEGIN) {
                t.begin = None;
            }
            if foreign.contains(Fields::PRIORITY) {
                t.hold = false;
                t.prio = None;
            }
            if foreign.contains(Fields::NICE) || (job.nice != 0 && applied.nice.is_none()) {
                t.nice = None;
            }
            if t.hold {
                t.prio = None; // a hold is priority 0: nothing else to set
            }
        }
        let target = target.unwrap_or_default();

        let mut update = JobUpdate {
            job_id: id,
            ..JobUpdate::default()
        };
        let mut next = Applied {
            until: input.now + i64::from(target.ttl),
            why: target.why.clone(),
            ..Applied::default()
        };
        let mut said = Vec::new();

        // Node list.
        if !foreign.contains(Fields::NODES) {
            match (&target.pin, &applied.pin) {
                (Some(want), have) if have.as_ref() != Some(want) => {
                    update.req_nodes = Some(want.join(","));
                    update.min_nodes = target.node_count;
                    said.push(format!("pin to {}", want.join(",")));
                }
                (None, Some(_)) => {
                    update.req_nodes = Some(String::new());
                    update.min_nodes = applied.nodes_was;
                    said.push("unpin".to_string());
                }
                _ => {}
            }
            if target.pin.is_some() {
                next.pin = target.pin.clone();
                next.nodes_was = applied.nodes_was.or(Some(job.min_nodes));
            }
        } else if applied.pin.is_some() {
            // Someone else changed the node list: it is theirs now; forget ours.
        }

        // Begin time: a decision's delay, or releasing cinch's delay / submit-time hold.
        if !foreign.contains(Fields::BEGIN) {
            let ours_now = applied
                .begin
                .or(hold.filter(|&t| t == job.eligible_time || job.eligible_time == 0));
            match (target.begin, ours_now) {
                (Some(want), have) if have != Some(want) => {
                    update.begin_time = Some(want);
                    said.push(format!("delay until {want}"));
                }
                (None, Some(_)) if job.eligible_time > input.now || job.eligible_time == 0 => {
                    update.begin_time = Some(input.now);
                    said.push("release delay".to_string());
                }
                _ => {}
            }
            next.begin = target.begin;
        }

        // Hold and priority.
        if !foreign.contains(Fields::PRIORITY) {
            if target.hold && !applied.hold {
                update.priority = Some(0);
                said.push("hold".to_string());
            } else if !target.hold && applied.hold && job.held {
                update.priority = Some(PRIORITY_AUTOMATIC);
                said.push("release hold".to_string());
            }
            next.hold = target.hold;
            match (target.prio, applied.prio) {
                (Some(want), have) if have != Some(want) && !target.hold => {
                    update.priority = Some(want);
                    said.push(format!("priority {want}"));
                }
                (None, Some(ours)) if job.priority == ours && !target.hold => {
                    update.priority = Some(PRIORITY_AUTOMATIC);
                    said.push("automatic priority".to_string());
                }
                _ => {}
            }
            next.prio = target.prio;
        }

        // Nice.
        if !foreign.contains(Fields::NICE) {
            let was = applied.nice.map_or(job.nice, |(was, _)| was);
            match (target.nice, applied.nice) {
                (Some(want), have) if have.map(|(_, n)| n) != Some(want) => {
                    update.nice = Some(want);
                    said.push(format!("nice {want}"));
                }
                (None, Some((was, ours))) if job.nice == ours => {
                    update.nice = Some(was);
                    said.push(format!("nice back to {was}"));
                }
                _ => {}
            }
            next.nice = target.nice.map(|n| (was, n));
        }

        let changes = update.req_nodes.is_some()
            || update.min_nodes.is_some()
            || update.begin_time.is_some()
            || update.priority.is_some()
            || update.nice.is_some();
        if !changes {
            if !next.is_empty() {
                out.renewed.insert(id, next.until);
            }
            continue;
        }
        // Record what cinch now owns (or drop the record), and retire the submit hold marker.
        let mut comment = replace_segment(
            job.admin_comment.as_deref(),
            DECISION_PREFIX,
            (!next.is_empty()).then(|| next.format()).as_deref(),
        );
        if hold.is_some() {
            if let Some(record) = segment(Some(&comment), RECORD_PREFIX) {
                let without: Vec<&str> = record
                    .split_whitespace()
                    .filter(|w| !w.starts_with(HOLD_KEY))
                    .collect();
                comment = replace_segment(Some(&comment), RECORD_PREFIX, Some(&without.join(" ")));
            }
        }
        update.admin_comment = Some(comment);
        update.summary = if next.is_empty() {
            format!("{} (cinch's changes undone)", said.join(", "))
        } else {
            format!("{}: {}", said.join(", "), target.why)
        };
        out.updates.push(update);
    }
    out
}

fn describe(t: &Target) -> String {
    let mut parts = Vec::new();
    if let Some(pin) = &t.pin {
        parts.push(format!("pin to {}", pin.join(",")));
    }
    if let Some(b) = t.begin {
        parts.push(format!("delay until {b}"));
    }
    if t.hold {
        parts.push("hold".into());
    }
    if let Some(p) = t.prio {
        parts.push(format!("priority {p}"));
    }
    if let Some(n) = t.nice {
        parts.push(format!("nice {n}"));
    }
    format!("{}: {}", parts.join(", "), t.why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::view::tests::job;

    const NOW: i64 = 10_000;

    fn nodes() -> HashSet<String> {
        ["n1", "n2", "n3", "n4"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn pin(id: u32, to: &[&str]) -> Decision {
        Decision {
            pin_nodes: Some(to.iter().map(|s| s.to_string()).collect()),
            node_count: Some(to.len() as u32),
            ..Decision::explain(id, "consolidated", 300)
        }
    }

    fn run(jobs: &[JobView], mode: Mode, decisions: Option<&[Decision]>) -> Output {
        run_with(jobs, mode, decisions, &HashMap::new())
    }

    fn run_with(
        jobs: &[JobView],
        mode: Mode,
        decisions: Option<&[Decision]>,
        foreign: &HashMap<u32, Fields>,
    ) -> Output {
        let nodes = nodes();
        let renewed = HashMap::new();
        reconcile(
            jobs,
            &Input {
                now: NOW,
                mode,
                decisions,
                nodes: &nodes,
                foreign,
                renewed: &renewed,
            },
        )
    }

    fn pending(id: u32) -> JobView {
        let mut j = job(id, JobState::Pending);
        j.min_nodes = 1;
        j.max_nodes = None;
        j.admin_comment = Some("cinch: gpus=12".into());
        j
    }

    /// The job as Slurm shows it after `update` was applied.
    fn after(mut j: JobView, u: &JobUpdate) -> JobView {
        if let Some(nodes) = &u.req_nodes {
            j.req_nodes = (!nodes.is_empty()).then(|| nodes.clone());
        }
        if let Some(n) = u.min_nodes {
            j.min_nodes = n;
        }
        if let Some(t) = u.begin_time {
            j.eligible_time = t;
        }
        if let Some(p) = u.priority {
            j.held = p == 0;
            j.priority = if p == PRIORITY_AUTOMATIC { 1000 } else { p };
        }
        if let Some(n) = u.nice {
            j.nice = n;
        }
        j.admin_comment = u.admin_comment.clone();
        j
    }

    #[test]
    fn the_segment_round_trips() {
        let a = Applied {
            pin: Some(vec!["n1".into(), "n2".into()]),
            nodes_was: Some(1),
            begin: Some(123),
            hold: true,
            prio: Some(5),
            nice: Some((0, 10)),
            until: 999,
            why: "because | reasons".into(),
        };
        let text = a.format();
        assert_eq!(
            text,
            "cinch-decision: pin=n1,n2 nodes_was=1 begin=123 hold=1 prio=5 nice_was=0 nice=10 until=999 why=because / reasons"
        );
        assert_eq!(
            Applied::parse(&text),
            Some(Applied {
                why: "because / reasons".into(),
                ..a
            })
        );
    }

    #[test]
    fn enforce_pins_once_then_renews_without_updating() {
        let j = pending(7);
        let decisions = [pin(7, &["n1", "n2"])];
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&decisions));
        assert_eq!(out.updates.len(), 1);
        let u = &out.updates[0];
        assert_eq!(u.req_nodes.as_deref(), Some("n1,n2"));
        assert_eq!(u.min_nodes, Some(2));
        let comment = u.admin_comment.as_deref().unwrap();
        assert!(comment.starts_with("cinch: gpus=12 | cinch-decision: pin=n1,n2 nodes_was=1 until=10300 why=consolidated"), "{comment}");

        let j = after(j, u);
        let again = run(&[j], Mode::Enforce, Some(&decisions));
        assert!(again.updates.is_empty(), "{:?}", again.updates);
        assert_eq!(again.renewed.get(&7), Some(&10_300));
    }

    #[test]
    fn losing_the_optimizer_undoes_everything_cinch_did() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1", "n2"])]),
        );
        let j = after(j, &applied.updates[0]);
        let out = run(std::slice::from_ref(&j), Mode::Enforce, None);
        let u = &out.updates[0];
        assert_eq!(u.req_nodes.as_deref(), Some(""), "node list cleared");
        assert_eq!(u.min_nodes, Some(1), "node count restored");
        assert_eq!(u.admin_comment.as_deref(), Some("cinch: gpus=12"));
        let j = after(j, u);
        assert!(
            run(&[j], Mode::Enforce, None).updates.is_empty(),
            "nothing left to undo"
        );
    }

    #[test]
    fn decisions_stand_until_their_ttl_then_are_undone() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1"])]),
        );
        let j = after(j, &applied.updates[0]);
        // The optimizer answers but no longer mentions job 7: keep it while the TTL runs.
        let nodes = nodes();
        let (foreign, renewed) = (HashMap::new(), HashMap::new());
        let at = |now| {
            reconcile(
                std::slice::from_ref(&j),
                &Input {
                    now,
                    mode: Mode::Enforce,
                    decisions: Some(&[]),
                    nodes: &nodes,
                    foreign: &foreign,
                    renewed: &renewed,
                },
            )
        };
        assert!(at(NOW + 299).updates.is_empty());
        let expired = at(NOW + 301);
        assert_eq!(expired.updates[0].req_nodes.as_deref(), Some(""));
    }

    #[test]
    fn an_explicit_explanation_replaces_an_earlier_action() {
        let j = pending(7);
        let applied = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1"])]),
        );
        let j = after(j, &applied.updates[0]);
        let out = run(
            &[j],
            Mode::Enforce,
            Some(&[Decision::explain(7, "waits", 300)]),
        );
        assert_eq!(out.updates[0].req_nodes.as_deref(), Some(""));
    }

    #[test]
    fn shadow_and_off_change_nothing_but_shadow_reports() {
        let j = pending(7);
        let decisions = [pin(7, &["n1", "n2"])];
        let shadow = run(std::slice::from_ref(&j), Mode::Shadow, Some(&decisions));
        assert!(shadow.updates.is_empty());
        assert_eq!(
            shadow.shadow,
            vec![(7, "pin to n1,n2: consolidated".to_string())]
        );
        let off = run(&[j], Mode::Off, Some(&decisions));
        assert!(off.updates.is_empty() && off.shadow.is_empty());
    }

    #[test]
    fn garbage_decisions_are_refused_and_nothing_is_applied() {
        let j = pending(7);
        let mut absurd = vec![
            pin(99, &["n1"]),
            pin(7, &["ghost"]),
            Decision {
                delay_until: Some(NOW + MAX_DELAY_S + 1),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                priority: Some(0),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                nice: Some(i32::MIN),
                ..Decision::explain(7, "x", 60)
            },
            Decision {
                ttl_s: 0,
                ..pin(7, &["n1"])
            },
            Decision {
                node_count: Some(3),
                ..pin(7, &["n1"])
            },
            pin(7, &["n1", "n1"]),
        ];
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&absurd));
        assert!(out.updates.is_empty(), "{:?}", out.updates);
        assert_eq!(out.refused.len(), absurd.len(), "{:?}", out.refused);
        assert!(out.refused[0].contains("not a pending job"));
        assert!(out.refused[1].contains("unknown node 'ghost'"));
        // A valid decision next to garbage still applies.
        absurd.push(pin(7, &["n2"]));
        let out = run(&[j], Mode::Enforce, Some(&absurd));
        assert_eq!(out.updates[0].req_nodes.as_deref(), Some("n2"));
    }

    #[test]
    fn delays_priorities_and_nice_apply_and_undo() {
        let j = pending(7);
        let d = Decision {
            delay_until: Some(NOW + 60),
            priority: Some(5_000),
            nice: Some(10),
            ..Decision::explain(7, "later", 120)
        };
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        let u = &out.updates[0];
        assert_eq!(
            (u.begin_time, u.priority, u.nice),
            (Some(NOW + 60), Some(5_000), Some(10))
        );
        let j = after(j, u);
        let undo = run(&[j], Mode::Off, Some(&[]));
        let u = &undo.updates[0];
        assert_eq!(u.begin_time, Some(NOW), "released now");
        assert_eq!(u.priority, Some(PRIORITY_AUTOMATIC));
        assert_eq!(u.nice, Some(0));
        assert_eq!(u.admin_comment.as_deref(), Some("cinch: gpus=12"));
    }

    #[test]
    fn holds_apply_and_release() {
        let j = pending(7);
        let d = Decision {
            hold: Some(true),
            ..Decision::explain(7, "wait", 60)
        };
        let out = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        assert_eq!(out.updates[0].priority, Some(0));
        let j = after(j, &out.updates[0]);
        let undo = run(&[j], Mode::Enforce, None);
        assert_eq!(undo.updates[0].priority, Some(PRIORITY_AUTOMATIC));
    }

    #[test]
    fn what_users_and_admins_set_is_never_touched() {
        // The user gave a node list and a nice value at submission.
        let mut j = pending(7);
        j.req_nodes = Some("n3".into());
        j.nice = 5;
        let d = Decision {
            nice: Some(-5),
            ..pin(7, &["n1"])
        };
        assert!(run(&[j], Mode::Enforce, Some(std::slice::from_ref(&d)))
            .updates
            .is_empty());

        // An admin changed the priority after cinch set it: cinch neither resets nor undoes it.
        let j = pending(8);
        let d = Decision {
            priority: Some(5_000),
            ..Decision::explain(8, "tier", 60)
        };
        let applied = run(std::slice::from_ref(&j), Mode::Enforce, Some(&[d]));
        let mut j = after(j, &applied.updates[0]);
        j.priority = 7; // the admin's value
        let foreign = HashMap::from([(8, Fields::PRIORITY)]);
        let out = run_with(&[j], Mode::Enforce, None, &foreign);
        assert!(
            out.updates.iter().all(|u| u.priority.is_none()),
            "{:?}",
            out.updates
        );
    }

    #[test]
    fn requeues_only_running_jobs_that_allow_it_and_only_in_enforce() {
        let mut job = pending(7);
        job.state = JobState::Running;
        let ask = Decision {
            requeue: Some(true),
            ..Decision::explain(7, "consolidate", 60)
        };
        let out = run(
            std::slice::from_ref(&job),
            Mode::Enforce,
            Some(std::slice::from_ref(&ask)),
        );
        assert!(out.requeues.is_empty());
        assert!(
            out.refused[0].contains("without --requeue"),
            "{:?}",
            out.refused
        );

        job.requeue = true;
        let out = run(
            std::slice::from_ref(&job),
            Mode::Enforce,
            Some(std::slice::from_ref(&ask)),
        );
        assert_eq!(out.requeues, vec![(7, "consolidate".to_string())]);
        assert!(out.updates.is_empty() && out.refused.is_empty());

        let out = run(
            std::slice::from_ref(&job),
            Mode::Shadow,
            Some(std::slice::from_ref(&ask)),
        );
        assert!(out.requeues.is_empty());
        assert_eq!(out.shadow[0].1, "requeue: consolidate");

        let mixed = Decision {
            priority: Some(5),
            ..ask.clone()
        };
        let out = run(std::slice::from_ref(&job), Mode::Enforce, Some(&[mixed]));
        assert!(out.requeues.is_empty());
        assert!(
            out.refused[0].contains("other actions"),
            "{:?}",
            out.refused
        );

        let out = run(&[pending(7)], Mode::Enforce, Some(&[ask]));
        assert!(out.requeues.is_empty());
        assert!(out.refused[0].contains("not running"), "{:?}", out.refused);
    }

    #[test]
    fn the_submit_hold_is_released_whatever_happens() {
        let mut j = pending(7);
        j.eligible_time = NOW + 5;
        j.admin_comment = Some(format!("ticket 1 | cinch: gpus=12 {HOLD_KEY}{}", NOW + 5));
        for (mode, decisions) in [
            (Mode::Enforce, Some(&[][..])),
            (Mode::Enforce, None),
            (Mode::Shadow, Some(&[][..])),
        ] {
            let out = run(std::slice::from_ref(&j), mode, decisions);
            let u = &out.updates[0];
            assert_eq!(u.begin_time, Some(NOW), "{mode:?}");
            assert_eq!(
                u.admin_comment.as_deref(),
                Some("ticket 1 | cinch: gpus=12"),
                "{mode:?}"
            );
        }
        // With a pin decision, pin and release in one update.
        let out = run(
            std::slice::from_ref(&j),
            Mode::Enforce,
            Some(&[pin(7, &["n1", "n2"])]),
        );
        let u = &out.updates[0];
        assert_eq!(
            (u.req_nodes.as_deref(), u.begin_time),
            (Some("n1,n2"), Some(NOW))
        );
        // The user changed the begin time themselves: theirs.
        let foreign = HashMap::from([(7, Fields::BEGIN)]);
        let out = run_with(&[j], Mode::Enforce, None, &foreign);
        assert!(out.updates.iter().all(|u| u.begin_time.is_none()));
    }
}
