//! The progress a job's output shows, recognised in what deep-learning jobs already print:
//!
//! - tqdm bars (Hugging Face Trainer's, PyTorch loops'): ` 12%|█▏   | 600/5000 [02:01<14:50,
//!   4.94it/s]`, redrawn after carriage returns, often in colour;
//! - Keras: `Epoch 3/90` then `120/500 [=====>....] - ETA: 1:02 - loss: 0.41`;
//! - PyTorch Lightning: `Epoch 3/89 ━━━━━━━━ 450/1000 0:00:10 • 0:00:12 44.23it/s`;
//! - plain loops: `step 1200/50000`, `Iteration 1200 / 50000`, `iter: 1200/50000`, `epoch [3/90]`;
//! - cinch's own helper: `cinch-progress: done=1200 total=50000`.
//!
//! A counter whose total is the whole run gives the run's progress as it is. A counter that
//! starts again (a bar per epoch) counts the run only together with an `epoch E/N` line: done
//! `(E - 1) x total + n` of `N x total`; without one it is not the run's progress and is left
//! alone. Of several counters (a training bar and an evaluation bar) the one with the largest
//! total is the run's. Only numbers come out of here.

use regex::Regex;

/// Steps done of a total, as the job's output last showed them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub done: u64,
    pub total: u64,
}

/// The longest unfinished line kept between two reads: a progress line is short; anything
/// longer is cut to its end.
const MAX_PARTIAL: usize = 4096;

/// Reads output as it comes and keeps the latest progress it shows.
#[derive(Debug)]
pub struct Recognizer {
    patterns: Patterns,
    /// The output after the last line end (a tqdm bar is redrawn without a newline).
    partial: String,
    /// The latest `epoch E/N`.
    epoch: Option<(u64, u64)>,
    /// The latest value of each step counter by its total, and whether it ever went back
    /// (a per-epoch bar).
    counters: Vec<Counter>,
    /// The helper's own report, which wins.
    reported: Option<Mark>,
}

#[derive(Debug, Clone, Copy)]
struct Counter {
    total: u64,
    done: u64,
    restarts: bool,
    /// The epoch it was seen in.
    epoch: Option<(u64, u64)>,
}

#[derive(Debug)]
struct Patterns {
    ansi: Regex,
    helper: Regex,
    epoch: Regex,
    counter: Regex,
}

impl Default for Recognizer {
    fn default() -> Self {
        Recognizer {
            patterns: Patterns {
                ansi: Regex::new(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")
                    .expect("valid"),
                helper: Regex::new(r"cinch-progress:\s*done=(\d+)\s+total=(\d+)").expect("valid"),
                epoch: Regex::new(r"(?i)\bepoch\b\s*[:\[]?\s*(\d+)\s*(?:/|of)\s*(\d+)")
                    .expect("valid"),
                // n/total after step / iter / iteration / batch, before a tqdm or Keras bar, or
                // after a rich bar (Lightning's).
                counter: Regex::new(
                    r"(?ix)
                    (?: \b(?:step|steps|iter|iters|iteration|iterations|batch)\b \s* [:=]? \s* \[? \s*
                        (?P<n1>\d+) \s* (?:/|of) \s* (?P<t1>\d+)
                    | (?:^|[\s|]) (?P<n2>\d+) / (?P<t2>\d+) \s* (?:\[|━|─|╸|╺|=|\|)
                    | [━─╸╺] \s* (?P<n3>\d+) / (?P<t3>\d+) \b
                    )",
                )
                .expect("valid"),
            },
            partial: String::new(),
            epoch: None,
            counters: Vec::new(),
            reported: None,
        }
    }
}

impl Recognizer {
    /// Reads the next bytes of the output.
    pub fn feed(&mut self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let mut pending = std::mem::take(&mut self.partial);
        pending.push_str(&text);
        let mut segments: Vec<&str> = pending.split(['\r', '\n']).collect();
        // The last segment is unfinished: kept, but read now too (a bar's latest redraw).
        let last = segments.pop().unwrap_or("");
        for segment in segments {
            self.line(segment);
        }
        self.line(last);
        let keep = if last.len() > MAX_PARTIAL {
            let mut cut = last.len() - MAX_PARTIAL;
            while !last.is_char_boundary(cut) {
                cut += 1;
            }
            &last[cut..]
        } else {
            last
        };
        self.partial = keep.to_string();
    }

    fn line(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let line = self.patterns.ansi.replace_all(raw, "");
        if let Some(c) = self.patterns.helper.captures(&line) {
            if let (Some(done), Some(total)) = (number(c.get(1)), number(c.get(2))) {
                if total > 0 && done <= total {
                    self.reported = Some(Mark { done, total });
                }
            }
            return;
        }
        let epoch = self.patterns.epoch.captures(&line).and_then(|c| {
            let (e, n) = (number(c.get(1))?, number(c.get(2))?);
            (n > 0 && e <= n).then_some((e, n))
        });
        if epoch.is_some() {
            self.epoch = epoch;
        }
        // The last counter on the line: Lightning prints the epoch first, the steps after.
        let counter = self
            .patterns
            .counter
            .captures_iter(&line)
            .filter_map(|c| {
                let n = number(c.name("n1").or(c.name("n2")).or(c.name("n3")))?;
                let t = number(c.name("t1").or(c.name("t2")).or(c.name("t3")))?;
                (t > 0 && n <= t).then_some((n, t))
            })
            .last();
        if let Some((done, total)) = counter {
            self.count(done, total);
        }
    }

    fn count(&mut self, done: u64, total: u64) {
        let epoch = self.epoch;
        match self.counters.iter_mut().find(|c| c.total == total) {
            Some(c) => {
                // A new epoch's bar starts again: expected. Within one epoch (or with none
                // named), the counter is not the run's.
                if done < c.done && c.epoch == epoch {
                    c.restarts = true;
                }
                c.done = done;
                c.epoch = epoch;
            }
            None => {
                // A handful of counters at most: bars of one job, not a log's every number.
                if self.counters.len() >= 8 {
                    self.counters.remove(0);
                }
                self.counters.push(Counter {
                    total,
                    done,
                    restarts: false,
                    epoch,
                });
            }
        }
    }

    /// The run's progress as the output shows it now, if it shows any.
    pub fn latest(&self) -> Option<Mark> {
        if self.reported.is_some() {
            return self.reported;
        }
        let main = self.counters.iter().max_by_key(|c| c.total);
        match (main, self.epoch) {
            // Steps within an epoch of a known count of epochs.
            (Some(c), Some((e, n)))
                if c.epoch == Some((e, n)) && c.total.checked_mul(n).is_some() =>
            {
                Some(Mark {
                    done: e.saturating_sub(1) * c.total + c.done,
                    total: c.total * n,
                })
            }
            // A counter of the whole run.
            (Some(c), _) if !c.restarts => Some(Mark {
                done: c.done,
                total: c.total,
            }),
            // Only epochs: the epochs done.
            (_, Some((e, n))) if main.is_none() => Some(Mark {
                done: e.saturating_sub(1),
                total: n,
            }),
            _ => None,
        }
    }
}

fn number(m: Option<regex::Match<'_>>) -> Option<u64> {
    m?.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&str]) -> Option<Mark> {
        let mut r = Recognizer::default();
        for c in chunks {
            r.feed(c.as_bytes());
        }
        r.latest()
    }

    fn mark(done: u64, total: u64) -> Option<Mark> {
        Some(Mark { done, total })
    }

    #[test]
    fn a_tqdm_bar_redrawn_after_carriage_returns_in_colour() {
        let bar = "\r 12%|\u{2588}\u{258f}        | 600/5000 [02:01<14:50,  4.94it/s]\
                   \r 13%|\u{2588}\u{258e}        | 650/5000 [02:11<14:40,  4.95it/s]";
        assert_eq!(read(&[bar]), mark(650, 5000));
        let coloured = "\x1b[32m 20%\x1b[0m|\x1b[32m\u{2588}\u{2588}\x1b[0m      | 1000/5000 [03:20<13:20, 5.00it/s]";
        assert_eq!(read(&[coloured]), mark(1000, 5000));
        // Split across two reads, mid-number.
        assert_eq!(
            read(&["\r 30%|###   | 15", "00/5000 [05:00<10:00]"]),
            mark(1500, 5000)
        );
    }

    #[test]
    fn hugging_faces_evaluation_bar_does_not_hide_the_training_bar() {
        let out = " 40%|####      | 2000/5000 [06:40<10:00, 5.00it/s]\n\
                   \r  0%|          | 0/50 [00:00<?, ?it/s]\r100%|##########| 50/50 [00:02<00:00]\n\
                   {'eval_loss': 0.41, 'epoch': 1.2}\n\
                   \r 41%|####      | 2050/5000 [06:50<09:50, 5.00it/s]";
        assert_eq!(read(&[out]), mark(2050, 5000));
    }

    #[test]
    fn keras_epochs_and_steps_make_the_runs_progress() {
        let out = "Epoch 1/90\n500/500 [==============================] - 12s 24ms/step - loss: 0.9\n\
                   Epoch 2/90\n500/500 [==============================] - 12s 24ms/step - loss: 0.7\n\
                   Epoch 3/90\n120/500 [=====>........................] - ETA: 9s - loss: 0.5";
        assert_eq!(read(&[out]), mark(2 * 500 + 120, 90 * 500));
    }

    #[test]
    fn lightnings_rich_bar_names_the_epoch_and_the_steps_on_one_line() {
        let out = "Epoch 3/89 \u{2501}\u{2501}\u{2501}\u{2501}\u{2578}      450/1000 0:00:10 \u{2022} 0:00:12 44.23it/s v_num: 0";
        assert_eq!(read(&[out]), mark(2 * 1000 + 450, 89 * 1000));
    }

    #[test]
    fn plain_loops_and_the_helpers_own_line() {
        assert_eq!(read(&["step 1200/50000 loss=0.3\n"]), mark(1200, 50000));
        assert_eq!(
            read(&["Iteration 1200 / 50000, lr 0.1\n"]),
            mark(1200, 50000)
        );
        assert_eq!(read(&["[train] iter: 1200/50000\n"]), mark(1200, 50000));
        assert_eq!(read(&["epoch [3/90] done\n"]), mark(2, 90));
        assert_eq!(
            read(&["step 10/100\ncinch-progress: done=7 total=9\nstep 11/100\n"]),
            mark(7, 9)
        );
    }

    #[test]
    fn a_bar_per_epoch_without_a_count_of_epochs_is_not_the_runs_progress() {
        // Lightning's default bar: `Epoch 3:` with no total of epochs, a bar that starts again.
        let out = "Epoch 0: 100%|####| 1000/1000 [01:00<00:00]\nEpoch 1:  45%|##  | 450/1000 [00:27<00:33]";
        assert_eq!(read(&[out]), None);
    }

    #[test]
    fn output_that_shows_no_progress_gives_none() {
        for out in [
            "",
            "loading data\nmodel has 110/220 layers frozen\n",
            "accuracy 0.91, 3/4 of the data\n",
            "step 5/0\n",
            "step 9/5\n",
            "\x1b[2K\x1b[1A",
        ] {
            assert_eq!(read(&[out]), None, "{out:?}");
        }
    }

    #[test]
    fn an_endless_line_is_kept_to_its_end() {
        let mut r = Recognizer::default();
        r.feed("x".repeat(100_000).as_bytes());
        assert!(r.partial.len() <= MAX_PARTIAL);
        r.feed(b" step 3/10\n");
        assert_eq!(r.latest(), mark(3, 10));
    }
}
