//! One pending job's change, worked out field by field against what cinch applied before.

use super::*;

/// One pending job's change, if Slurm must be told anything.
pub(super) fn job_plan<'a>(
    job: &'a PendingState,
    targets: &mut FxHashMap<u32, Target<'a>>,
    input: &Input,
    out: &mut Plan,
) -> Option<JobChange> {
    let id = job.job_id;
    let (target, lapsed) = round_target(job, targets, input, out)?;
    let target = target.map(|t| leave_theirs(t, job)).unwrap_or_default();
    let mut fields = FieldPlan {
        set: SlurmFields::default(),
        // The record after this round; its node list and reason are set only if Slurm is told
        // anything (a renewal keeps the record as it is).
        next: Applied {
            until: input.now + i64::from(target.ttl),
            ..Applied::default()
        },
        next_pin: None,
        said: Vec::new(),
    };
    fields.node_list(&target, job);
    fields.begin_time(&target, job, input);
    fields.hold_and_priority(&target, job);
    fields.nice(&target, job);
    fields.gpu_count(&target, job);

    let FieldPlan {
        set,
        mut next,
        next_pin,
        said,
    } = fields;
    if set.is_empty() {
        if !next.is_empty() || next_pin.is_some() {
            out.renewed.push((id, next.until));
        }
        return None;
    }
    // Slurm is told something: only now is the change itself written out (most jobs of most
    // rounds have nothing to change, and a change is a few hundred bytes).
    let mut change = JobChange {
        job_id: id,
        req_nodes: set.req_nodes,
        min_nodes: set.min_nodes,
        max_nodes: set.max_nodes,
        begin_time: set.begin_time,
        priority: set.priority,
        nice: set.nice,
        gpus: set.gpus,
        retire_submit_hold: job.submit_hold.is_some(),
        at: input.now,
        ..JobChange::default()
    };
    next.pin = next_pin.map(Arc::from);
    if next.is_empty() {
        change.undone_because = Some(undone_because(job, input, lapsed));
    }
    if input.words {
        let why = target.why.words();
        next.why = if *job.applied.why == *why {
            job.applied.why.clone()
        } else {
            why.as_ref().into()
        };
        change.summary = if next.is_empty() {
            format!("{} (cinch's changes undone)", said.join(", "))
        } else {
            format!("{}: {}", said.join(", "), why)
        };
    }
    change.record = next;
    Some(change)
}

/// What this round wants of the job, and whether its decision lapsed (not renewed in time).
/// `None` when nothing is to change at all: what was applied stands, no hold to release.
pub(super) fn round_target<'a>(
    job: &'a PendingState,
    targets: &mut FxHashMap<u32, Target<'a>>,
    input: &Input,
    out: &mut Plan,
) -> Option<(Option<Target<'a>>, bool)> {
    let applied = &job.applied;
    let until = applied.until.max(job.renewed_until.unwrap_or(0));
    let target = match (input.mode, input.decisions) {
        // Kept off by the admin: whatever cinch applied before is undone now.
        _ if job.hands_off.is_some() => None,
        (Mode::Enforce, Some(_)) => match targets.remove(&job.job_id) {
            Some(t) => Some(t),
            // Not mentioned this round: what was applied stands until its TTL.
            // Nothing to change then, unless a submit hold still needs releasing.
            None if !applied.is_empty() && until > input.now => {
                job.submit_hold?;
                Some(Target::keep(applied, until - input.now))
            }
            None => return Some((None, true)),
        },
        (Mode::Shadow, Some(_)) => {
            if let Some(t) = targets.get(&job.job_id) {
                if t.has_action() {
                    out.shadow.push((job.job_id, t.describe()));
                }
            }
            None
        }
        _ => None,
    };
    Some((target, false))
}

/// What the user or an admin set is theirs: the target leaves those fields alone.
pub(super) fn leave_theirs<'a>(mut t: Target<'a>, job: &PendingState) -> Target<'a> {
    let (foreign, applied) = (job.foreign, &job.applied);
    if foreign.contains(Fields::NODES) || (job.has_node_list && applied.pin.is_none()) {
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
    t
}

/// Why cinch's changes to a job are undone this round, in words for its record.
pub(super) fn undone_because(job: &PendingState, input: &Input, lapsed: bool) -> String {
    match (&job.hands_off, input.mode, input.decisions) {
        (Some(why), _, _) => format!("the admin keeps cinch off this job ({why})"),
        (None, Mode::Enforce, Some(_)) if lapsed => {
            "its decision lapsed: the optimizer no longer asked for it".to_string()
        }
        (None, Mode::Enforce, Some(_)) => "the optimizer no longer asks for it".to_string(),
        (None, Mode::Enforce, None) => {
            "the optimizer could not be reached, so Slurm's own settings are back".to_string()
        }
        (None, mode, _) => format!("cinch's mode is {mode} now: it changes no job"),
    }
}

/// One job's update as it is worked out field by field: what Slurm is told, the record after
/// this round and what the change list says.
pub(super) struct FieldPlan<'t> {
    set: SlurmFields,
    next: Applied,
    next_pin: Option<&'t [String]>,
    said: Vec<String>,
}

/// The Slurm fields a change sets ([`JobChange`]'s); all `None`: Slurm is told nothing.
#[derive(Default)]
struct SlurmFields {
    req_nodes: Option<Vec<String>>,
    min_nodes: Option<u32>,
    max_nodes: Option<u32>,
    begin_time: Option<i64>,
    priority: Option<u32>,
    nice: Option<i64>,
    gpus: Option<u32>,
}

impl SlurmFields {
    fn is_empty(&self) -> bool {
        self.req_nodes.is_none()
            && self.min_nodes.is_none()
            && self.max_nodes.is_none()
            && self.begin_time.is_none()
            && self.priority.is_none()
            && self.nice.is_none()
            && self.gpus.is_none()
    }
}

impl<'t> FieldPlan<'t> {
    /// The node list. (Someone else changed it: it is theirs now; cinch's pin is forgotten.)
    fn node_list(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::NODES) {
            return;
        }
        match (target.pin, &applied.pin) {
            // A pin recorded before cinch bounded the node count is bounded now.
            (Some(want), have)
                if have.as_deref() != Some(want) || applied.max_nodes_was.is_none() =>
            {
                self.set.req_nodes = Some(want.to_vec());
                self.set.min_nodes = target.node_count;
                self.set.max_nodes = target.node_count;
                self.said.push(format!("pin to {}", want.join(",")));
            }
            (None, Some(_)) => {
                self.set.req_nodes = Some(Vec::new());
                self.set.min_nodes = applied.nodes_was;
                self.set.max_nodes = applied.max_nodes_was;
                self.said.push("unpin".to_string());
            }
            _ => {}
        }
        if target.pin.is_some() {
            self.next_pin = target.pin;
            self.next.nodes_was = applied.nodes_was.or(Some(job.min_nodes));
            self.next.max_nodes_was = applied.max_nodes_was.or(Some(job.max_nodes));
        }
    }

    /// The begin time: a decision's delay, or releasing cinch's delay / submit-time hold.
    fn begin_time(&mut self, target: &Target<'t>, job: &PendingState, input: &Input) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::BEGIN) {
            return;
        }
        let ours_now = applied.begin.or(job
            .submit_hold
            .filter(|&t| t == job.eligible_time || job.eligible_time == 0));
        match (target.begin, ours_now) {
            // The delay in force still holds the job long enough, and the decision does not
            // want it to start sooner: it stands, and Slurm is not told anything.
            (Some(want), _)
                if applied.begin.is_some_and(|have| {
                    want >= have && have > input.now + input.renew_within_s
                }) =>
            {
                self.next.begin = applied.begin;
            }
            (Some(want), have) if have != Some(want) => {
                self.set.begin_time = Some(want);
                self.said.push(format!(
                    "delay until {}",
                    crate::slurm::slurm_time::format_time(want)
                ));
                self.next.begin = Some(want);
            }
            (None, Some(_)) if job.eligible_time > input.now || job.eligible_time == 0 => {
                self.set.begin_time = Some(input.now);
                self.said.push("release delay".to_string());
            }
            _ => self.next.begin = target.begin,
        }
    }

    /// Hold and priority.
    fn hold_and_priority(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::PRIORITY) {
            return;
        }
        if target.hold && !applied.hold {
            self.set.priority = Some(0);
            self.said.push("hold".to_string());
        } else if !target.hold && applied.hold && job.held {
            self.set.priority = Some(PRIORITY_AUTOMATIC);
            self.said.push("release hold".to_string());
        }
        self.next.hold = target.hold;
        match (target.prio, applied.prio) {
            (Some(want), have) if have != Some(want) && !target.hold => {
                self.set.priority = Some(want);
                self.said.push(format!("priority {want}"));
            }
            (None, Some(ours)) if job.priority == ours && !target.hold => {
                self.set.priority = Some(PRIORITY_AUTOMATIC);
                self.said.push("automatic priority".to_string());
            }
            _ => {}
        }
        self.next.prio = target.prio;
    }

    /// Nice. (One update may release cinch's priority and set a nice: slurmctld handles the
    /// priority first, and ignores a nice only while a priority is set outright.)
    fn nice(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        if job.foreign.contains(Fields::NICE) {
            return;
        }
        let was = applied.nice.map_or(job.nice, |(was, _)| was);
        match (target.nice, applied.nice) {
            (Some(want), have) if have.map(|(_, n)| n) != Some(want) => {
                self.set.nice = Some(want);
                self.said.push(format!("nice {want}"));
            }
            (None, Some((was, ours))) if job.nice == ours => {
                self.set.nice = Some(was);
                self.said.push(format!("nice back to {was}"));
            }
            _ => {}
        }
        self.next.nice = target.nice.map(|n| (was, n));
    }

    /// The GPU count (elastic jobs; validated against the declared range).
    fn gpu_count(&mut self, target: &Target<'t>, job: &PendingState) {
        let applied = &job.applied;
        let was = applied.gpus.map_or(job.gpus, |(was, _)| was);
        match (target.gpus, applied.gpus) {
            (Some(want), _) if want != job.gpus => {
                self.set.gpus = Some(want);
                self.said
                    .push(format!("{} (asked {was})", crate::util::words::gpus(want)));
            }
            (None, Some((was, ours))) if job.gpus == ours && was != ours => {
                self.set.gpus = Some(was);
                self.said
                    .push(format!("back to {}", crate::util::words::gpus(was)));
            }
            _ => {}
        }
        self.next.gpus = target.gpus.filter(|&n| n != was).map(|n| (was, n));
    }
}
