//! Wait and reserve: whether a job whose best shape is not free waits for it, how long, and the
//! reservation that keeps backfill off the GPUs it waits for.

use super::*;

/// The Slurm priority of the job cinch reserves for: above every job it orders.
pub const RESERVED_PRIORITY: u32 = 4 * TOP_PRIORITY;

/// Makes `d` the decision that reserves `nodes` for `job`: pinned there, first in Slurm's order;
/// its reason says `why` it waits and what is reserved.
pub(super) fn reserve(d: &mut Decision, job: &PendingJob, nodes: Vec<String>, at: i64, why: Shape) {
    d.reason.push(Clause::Shape(why));
    d.reason.push(Clause::Reserved {
        nodes: nodes.clone(),
        at,
    });
    let count = nodes.len() as u32;
    d.node_count = (count != job.min_nodes).then_some(count);
    d.pin_nodes = Some(nodes);
    d.priority = Some(RESERVED_PRIORITY);
}

impl Cinch {
    /// The nodes a waiting job's best shape is expected to free on first (by the release model)
    /// and when; `None` when no release frees one.
    pub(super) fn reservation(
        &self,
        job: &PendingJob,
        cluster: &Cluster,
        releases: &mut Releases,
        now: i64,
    ) -> Option<(Vec<String>, i64)> {
        if job.gpus_per_node.is_some() || left_as_submitted(job, now).is_some() {
            return None;
        }
        let sizes = Sizes {
            node_gpus: cluster.node_size(),
            rack_gpus: cluster.largest_rack_gpus(),
        };
        let (at, positions) = releases.first_best_shape(now, job.gpus, sizes.ideal(job.gpus))?;
        let mut names: Vec<String> = positions
            .iter()
            .map(|&i| cluster.name(i).to_string())
            .collect();
        names.sort();
        Some((names, at))
    }

    /// Whether a job whose best shape is not free should wait for it: only while the wait the
    /// running jobs' predicted ends give is shorter than the extra run time spread would cost
    /// (and at most `max_wait_s` since it was queued). `Ok((until, why))` to wait, `Err(why)`
    /// to take the spread placement now.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn worth_waiting(
        &self,
        job: &PendingJob,
        r: &Ranked,
        ideal: Ideal,
        level: usize,
        releases: &mut Releases,
        history: &History,
        waiting_share: f64,
        now: i64,
    ) -> Result<(i64, Shape), Shape> {
        let sens = self.sensitivity(job, level, history);
        if sens.slowdown < self.0.min_slowdown {
            return Err(Shape::ComputeBound(sens));
        }
        // Spread, the job runs remaining / (1 - slowdown): that much longer than consolidated,
        // and the GPU-seconds it wastes delay every job waiting behind it by their share of the
        // cluster. While it waits, others use the GPUs that free: its wait costs only itself.
        let own_s = r.remaining_s * sens.slowdown / (1.0 - sens.slowdown).max(0.05);
        let cost_s = if self.0.wait_always {
            f64::INFINITY
        } else {
            own_s * (1.0 + waiting_share)
        };
        match releases.expected_at(now, job.gpus, ideal, 0) {
            Some(at)
                if at > now
                    && r.qos.as_ref().is_some_and(|q| {
                        !q.targets.is_empty()
                            && q.allowance_s >= 0.0
                            && (at - now) as f64 > q.allowance_s
                    }) =>
            {
                Err(Shape::WouldMissTarget { wait_s: at - now })
            }
            Some(at)
                if at > now
                    && ((at - now) as f64) < cost_s
                    && at - now <= i64::from(self.0.max_wait_s) =>
            {
                Ok((at, Shape::Waits { at, cost_s, sens }))
            }
            Some(at) if at > now => Err(Shape::TooLong {
                wait_s: at - now,
                cost_s,
                max_wait_s: self.0.max_wait_s,
            }),
            _ => Err(Shape::NoneExpected),
        }
    }

    /// A job's expected slowdown on a placement of `level` (1: several nodes of one rack, 2:
    /// across racks). What was observed on this cluster, under its current congestion, comes
    /// before the quiet-network table: runs of the same application (`app=` hint), of the same
    /// job, of every job on as many GPUs; then the application's measured slowdown; then the
    /// default. Across racks, cross-rack runs are used where enough were seen.
    pub(super) fn sensitivity(
        &self,
        job: &PendingJob,
        level: usize,
        history: &History,
    ) -> Sensitivity {
        let app = job.hints.get("app").map(|a| a.to_ascii_lowercase());
        if !history.knows_slowdowns() {
            // Nothing learned yet: the keys below would only be built to miss.
            return self.table_or_default(app);
        }
        // Only a named job has runs of its own to compare (the key is built only then).
        let key = job
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(|name| crate::learn::history::job_key(&job.user, Some(name), job.gpus));
        // (history key, runs of each kind needed, what it is): descriptions are built only for
        // the one that answers, as this runs for many pending jobs every round.
        enum Class {
            App,
            Similar,
            Gpus,
        }
        // Runs of different jobs compare by run time over time limit: only where limits
        // predict run times (within 2x on average here), else that ratio is noise. Runs of the
        // same job compare directly, but only a named job has runs of its own to compare.
        let ratios_tell = history
            .limit_log_error()
            .is_some_and(|e| e <= TRUSTED_LOG_ERROR);
        let app_key = app
            .as_ref()
            .filter(|_| ratios_tell)
            .map(|app| format!("app={app}"));
        let gpus_key = ratios_tell.then(|| format!("gpus={}", job.gpus));
        let classes = [
            app_key.as_deref().map(|k| (k, MIN_CLASS_RUNS, Class::App)),
            key.as_deref().map(|k| (k, 1, Class::Similar)),
            gpus_key
                .as_deref()
                .map(|k| (k, MIN_CLASS_RUNS, Class::Gpus)),
        ];
        for (class, min_runs, what) in classes.into_iter().flatten() {
            let learned = if level >= 2 {
                history
                    .learned_cross_rack_slowdown(class, min_runs)
                    .map(|s| (s, " across racks"))
                    .or_else(|| {
                        history
                            .learned_class_slowdown(class, min_runs)
                            .map(|s| (s, ""))
                    })
            } else {
                history
                    .learned_class_slowdown(class, min_runs)
                    .map(|s| (s, ""))
            };
            if let Some((slowdown, across)) = learned {
                let what = match what {
                    Class::App => class.to_string(),
                    Class::Similar => "similar jobs".to_string(),
                    Class::Gpus => format!("{}-GPU jobs", job.gpus),
                };
                return Sensitivity {
                    slowdown,
                    source: format!("{what}, learned here{across}"),
                };
            }
        }
        self.table_or_default(app)
    }

    /// A job's slowdown from its application's measured table entry, else the default.
    pub(super) fn table_or_default(&self, app: Option<String>) -> Sensitivity {
        if let Some(slowdown) = app.as_deref().and_then(crate::policy::app_slowdown) {
            return Sensitivity {
                slowdown,
                source: format!("app={}", app.unwrap_or_default()),
            };
        }
        Sensitivity {
            slowdown: self.0.default_slowdown,
            source: "default".into(),
        }
    }
}
