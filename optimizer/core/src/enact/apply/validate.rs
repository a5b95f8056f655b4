//! From a decision to what it asks of a job, once checked: a target, or why it is refused.

use super::*;

/// What a decision asks for, once validated. `Default`: nothing (undo whatever cinch applied).
/// It borrows the decision's (or the record's) node list and reason: most rounds repeat last
/// round's decisions, which renew a record without copying either.
#[derive(Debug, Clone, Default)]
pub(super) struct Target<'a> {
    pub(super) pin: Option<&'a [String]>,
    pub(super) node_count: Option<u32>,
    pub(super) begin: Option<i64>,
    pub(super) hold: bool,
    pub(super) prio: Option<u32>,
    pub(super) nice: Option<i64>,
    pub(super) gpus: Option<u32>,
    pub(super) ttl: u32,
    pub(super) why: Why<'a>,
}

/// Why a target stands: a decision's reason, put into words only when Slurm is told something
/// (most rounds renew what stands and write no words), or the words of cinch's record.
#[derive(Debug, Clone, Copy)]
pub(super) enum Why<'a> {
    Reason(&'a Reason),
    Words(&'a str),
}

impl Default for Why<'_> {
    fn default() -> Self {
        Why::Words("")
    }
}

impl Why<'_> {
    pub(super) fn words(&self) -> Cow<'_, str> {
        match self {
            Why::Reason(reason) => Cow::Owned(reason.to_string()),
            Why::Words(words) => Cow::Borrowed(words),
        }
    }
}

impl<'a> Target<'a> {
    pub(super) fn has_action(&self) -> bool {
        self.pin.is_some()
            || self.begin.is_some()
            || self.hold
            || self.prio.is_some()
            || self.nice.is_some()
            || self.gpus.is_some()
    }

    /// What cinch already applied, for `remaining` more seconds.
    pub(super) fn keep(applied: &'a Applied, remaining: i64) -> Target<'a> {
        Target {
            pin: applied.pin.as_deref(),
            node_count: applied.pin.as_ref().map(|p| p.len() as u32),
            begin: applied.begin,
            hold: applied.hold,
            prio: applied.prio,
            nice: applied.nice.map(|(_, n)| n),
            gpus: applied.gpus.map(|(_, n)| n),
            ttl: remaining.clamp(1, i64::from(MAX_TTL_S)) as u32,
            why: Why::Words(&applied.why),
        }
    }

    pub(super) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(pin) = &self.pin {
            parts.push(format!("pin to {}", pin.join(",")));
        }
        if let Some(b) = self.begin {
            parts.push(format!(
                "delay until {}",
                crate::slurm::slurm_time::format_time(b)
            ));
        }
        if self.hold {
            parts.push("hold".into());
        }
        if let Some(p) = self.prio {
            parts.push(format!("priority {p}"));
        }
        if let Some(n) = self.nice {
            parts.push(format!("nice {n}"));
        }
        if let Some(n) = self.gpus {
            parts.push(crate::util::words::gpus(n).to_string());
        }
        format!("{}: {}", parts.join(", "), self.why.words())
    }
}

/// An elastic size: only for a job whose user declared a range, and within it.
pub(super) fn check_size(
    job_id: u32,
    gpus: u32,
    elastic: Option<crate::models::elastic::Range>,
) -> Result<(), String> {
    match elastic {
        None => Err(format!(
            "job {job_id}: {gpus} GPUs asked for a job that is not elastic (its user declared no \
             elastic=MIN-MAX with a --gpus request)"
        )),
        Some(range) if !range.contains(gpus) => Err(format!(
            "job {job_id}: {gpus} GPUs is outside the range its user declared (elastic={}-{})",
            range.min, range.max
        )),
        Some(_) => Ok(()),
    }
}

pub(super) fn validate<'a>(
    d: &'a Decision,
    job: &PendingState,
    now: i64,
    nodes: &HashSet<String>,
) -> Result<Target<'a>, String> {
    if let Some(gpus) = d.gpus {
        check_size(d.job_id, gpus, job.elastic)?;
    }
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
        pin: d.pin_nodes.as_deref(),
        node_count: d
            .node_count
            .or(d.pin_nodes.as_ref().map(|p| p.len() as u32)),
        // A delay already in the past asks for nothing.
        begin: d.delay_until.filter(|&t| t > now),
        hold: d.hold == Some(true),
        prio: d.priority,
        nice: d.nice.map(i64::from),
        gpus: d.gpus,
        ttl: d.ttl_s,
        why: Why::Reason(&d.reason),
    })
}

/// Why a decision for a job the admin keeps cinch off is refused.
pub(super) fn hands_off_refusal(job_id: u32, why: &str) -> String {
    format!("job {job_id}: {why}, which cinch leaves alone")
}
