use super::*;

use crate::testing::hints;

/// [`decide`] with no jobs' shapes known (no fragmentation term).
fn decide_no_mix(
    job: &ShareJob,
    whole_gpu_wait_s: i64,
    gpus: &[SharedGpu],
    params: &ShareParams,
) -> Verdict {
    decide(job, whole_gpu_wait_s, gpus, &ShareMix::default(), params)
}

/// The job a decision is for (user 1000).
fn sj(prediction: Option<Prediction>, busy: Busy, run_s: i64) -> ShareJob {
    ShareJob {
        prediction,
        busy,
        run_s,
        user: Some(1000),
    }
}

fn gpu(node: &str, index: u32, free: u32, co: &[i64]) -> SharedGpu {
    SharedGpu {
        node: node.into(),
        index,
        shards_total: 8,
        shards_free: free,
        co_runners: co
            .iter()
            .map(|&left_s| CoRunner {
                left_s,
                busy: 1.0,
                user: Some(1000),
            })
            .collect(),
    }
}

/// The rules both builders of the view follow (the plugin's agent, the simulator): a
/// running job counts on its GPU; a waiting one on its node's fullest GPU that still holds
/// it, and nowhere (not in the mix either) when none does.
#[test]
fn the_view_counts_running_jobs_on_their_gpu_and_waiting_ones_where_slurm_will_start_them() {
    let mut view = ShareView {
        gpus: vec![gpu("n0", 0, 8, &[]), gpu("n0", 1, 8, &[])],
        ..ShareView::default()
    };
    let on = |busy| CoRunner {
        left_s: 600,
        busy,
        user: Some(1000),
    };
    assert!(view.add_running("n0", Some(1), 3, on(0.5)));
    assert!(!view.add_running("n9", Some(0), 3, on(0.5)));
    let frees = |v: &ShareView| v.gpus.iter().map(|g| g.shards_free).collect::<Vec<_>>();
    assert_eq!(frees(&view), [8, 5]);
    let params = ShareParams::default();
    let waiting = sj(None, Busy::UNKNOWN, 600);
    // 4 shards fit on both GPUs: the fuller one, GPU 1, takes them.
    assert!(view.add_waiting("n0", 4, &waiting, &params));
    assert_eq!(frees(&view), [8, 1]);
    // 9 fit on neither: left out, and out of the mix.
    assert!(!view.add_waiting("n0", 9, &waiting, &params));
    assert_eq!(frees(&view), [8, 1]);
    let mut mix = ShareMix::default();
    mix.add(375);
    mix.add(500);
    assert_eq!(view.mix, mix);
    assert_eq!(view.gpus[1].co_runners.len(), 2);
}

#[test]
fn memory_sizes_parse_in_the_units_users_write() {
    assert_eq!(parse_gib("10").unwrap(), 10.0);
    assert_eq!(parse_gib("10G").unwrap(), 10.0);
    assert_eq!(parse_gib("10GiB").unwrap(), 10.0);
    assert_eq!(parse_gib("512M").unwrap(), 0.5);
    assert_eq!(parse_gib("1t").unwrap(), 1024.0);
    for bad in ["", "G", "ten", "-1G", "0", "10X", "9999T", "1.2.3G"] {
        assert!(parse_gib(bad).is_err(), "{bad} parsed");
    }
}

#[test]
fn hints_are_checked_and_sharing_needs_one_gpu() {
    assert_eq!(check_hints(&hints(&[]), false), Ok(false));
    assert_eq!(check_hints(&hints(&[("share", "yes")]), true), Ok(true));
    assert_eq!(check_hints(&hints(&[("share", "no")]), false), Ok(false));
    use crate::wire::refusal::Refusal;
    let err = check_hints(&hints(&[("share", "maybe")]), true).unwrap_err();
    assert!(
        matches!(&err, Refusal::Hint(m) if m.contains("'maybe' is not yes or no")),
        "{err}"
    );
    // Two GPUs asked for where the hint needs one: the GPU request is what is wrong.
    let err = check_hints(&hints(&[("share", "yes")]), false).unwrap_err();
    assert!(
        matches!(&err, Refusal::GpuRequest(m) if m.contains("one GPU on one node")),
        "{err}"
    );
    let err = check_hints(&hints(&[("share", "yes"), ("gpu_mem", "lots")]), true).unwrap_err();
    assert!(
        matches!(&err, Refusal::Hint(m) if m.contains("gpu_mem")),
        "{err}"
    );
    let err = check_hints(&hints(&[("share", "yes"), ("elastic", "1-4")]), true).unwrap_err();
    assert!(
        matches!(&err, Refusal::Hint(m) if m.contains("elastic")),
        "{err}"
    );
    let err = check_hints(&hints(&[("batch", "0")]), true).unwrap_err();
    assert!(
        matches!(&err, Refusal::Hint(m) if m.contains("batch")),
        "{err}"
    );
}

#[test]
fn the_model_table_matches_batch_then_application() {
    let table = ModelTable::parse("bert:32=10G, bert=14G,resnet50=8G").unwrap();
    assert_eq!(table.lookup("BERT", Some(32)), Some(10.0));
    assert_eq!(table.lookup("bert", Some(64)), Some(14.0));
    assert_eq!(table.lookup("bert", None), Some(14.0));
    assert_eq!(table.lookup("yolo", None), None);
    for bad in ["bert", "bert:x=1G", "=1G", "bert=huge"] {
        assert!(ModelTable::parse(bad).is_err(), "{bad} parsed");
    }
    assert!(ModelTable::parse("").unwrap().is_empty());
}

#[test]
fn a_prediction_is_the_largest_known_peak_and_names_its_source() {
    assert_eq!(predict(None, None, None), None);
    let p = predict(Some(4.0), Some(10.0), Some((9.0, 3))).unwrap();
    assert_eq!((p.gib, p.source), (10.0, Source::Table));
    let p = predict(Some(4.0), None, Some((9.0, 3))).unwrap();
    assert_eq!(p.to_string(), "9.0G (observed peak of 3 similar jobs)");
    let p = predict(Some(12.0), None, Some((9.0, 1))).unwrap();
    assert_eq!(p.source, Source::Stated);
}

#[test]
fn observed_peaks_count_other_similar_jobs_only() {
    let mut book = ReportBook::default();
    let h = hints(&[("app", "bert"), ("batch", "32")]);
    let key = similar_key("ann", Some("train"), &h).unwrap();
    assert_eq!(key, "ann/bert:32");
    book.record_peak(&key, 7, 6.0);
    book.record_peak(&key, 7, 9.0);
    // A job's own report does not predict itself.
    assert_eq!(book.observed_peak(&key, 7), None);
    assert_eq!(book.observed_peak(&key, 8), Some((9.0, 1)));
    book.record_peak(&key, 9, 5.0);
    assert_eq!(book.observed_peak(&key, 10), Some((9.0, 2)));
    book.record_peak(&key, 11, f64::NAN);
    assert_eq!(book.observed_peak(&key, 10), Some((9.0, 2)));
    let p = predict_job(Some(&key), 10, &h, &ModelTable::default(), &book).unwrap();
    assert_eq!(p.source, Source::Observed(2));
    assert_eq!(similar_key("ann", None, &hints(&[])), None);
}

#[test]
fn shards_stand_for_usable_memory() {
    let params = ShareParams::default(); // 80G less 10%: 72G usable, 9G per shard of 8
    assert_eq!(params.shards_for(9.0, 8), Some(1));
    assert_eq!(params.shards_for(9.5, 8), Some(2));
    assert_eq!(params.shards_for(36.0, 8), Some(4));
    assert_eq!(params.shards_for(72.0, 8), Some(8));
    assert_eq!(params.shards_for(73.0, 8), None);
    assert_eq!(params.shards_for(1.0, 0), None);
    assert_eq!(params.speed(&[1.0]), 1.0);
    let constant = ShareParams {
        interference: Interference::Constant(0.5),
        ..params
    };
    assert!((constant.speed(&[1.0, 0.3]) - 2.0 / 3.0).abs() < 1e-12);
    // Measured: two light jobs share for free, two busy ones split the GPU.
    assert_eq!(params.speed(&[0.3, 0.3]), 1.0);
    assert!((params.speed(&[1.0, 1.0]) - 0.91 / 2.0).abs() < 1e-12);
}

#[test]
fn a_job_shares_only_where_it_fits_and_sharing_beats_waiting() {
    // The older constant model, whose arithmetic is easy to follow by hand.
    let params = ShareParams {
        interference: Interference::Constant(0.5),
        ..ShareParams::default()
    };
    let p = Some(Prediction {
        gib: 20.0,
        source: Source::Stated,
    }); // 3 shards
    let gpus = [
        gpu("n1", 0, 2, &[3_600]),
        gpu("n1", 1, 4, &[3_600]),
        gpu("n2", 0, 8, &[]),
    ];
    // An idle GPU first: sharing there costs nothing.
    match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 2_700, &gpus, &params) {
        Verdict::Share { node, index, .. } => assert_eq!((node.as_str(), index), ("n2", 0)),
        other => panic!("{other:?}"),
    }
    // Among GPUs that cost the same, best fit: the fewest shards left that still fit.
    let crowded = [
        gpu("n1", 0, 2, &[3_600]),
        gpu("n1", 1, 4, &[3_600]),
        gpu("n1", 2, 8, &[3_600]),
    ];
    match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 7_200, &crowded, &params) {
        Verdict::Share {
            node,
            index,
            shards,
            ..
        } => {
            assert_eq!((node.as_str(), index, shards), ("n1", 1, 3));
        }
        other => panic!("{other:?}"),
    }
    // Sharing adds 1 h (30 min to it, 30 min to the other job): not worth a 45 min wait.
    let busy = [gpu("n1", 1, 4, &[3_600])];
    assert!(
        matches!(decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 2_700, &busy, &params), Verdict::Whole(w) if w.contains("beats waiting"))
    );
    // With a whole GPU free, only sharing that slows no one: the idle shared GPU, not a
    // busy one.
    match decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 0, &gpus, &params) {
        Verdict::Share { node, index, .. } => assert_eq!((node.as_str(), index), ("n2", 0)),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 0, &busy, &params), Verdict::Whole(w) if w.contains("a whole GPU is free"))
    );
    // An unknown peak, a peak above usable memory: no sharing.
    assert!(
        matches!(decide_no_mix(&sj(None, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params), Verdict::Whole(w) if w.contains("no peak"))
    );
    let huge = Some(Prediction {
        gib: 75.0,
        source: Source::Stated,
    });
    // A peak above the usable 72G shares with no one, but may have an idle GPU's shards.
    match decide_no_mix(&sj(huge, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params) {
        Verdict::Share { node, shards, .. } => assert_eq!((node.as_str(), shards), ("n2", 8)),
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(decide_no_mix(&sj(huge, Busy::UNKNOWN, 3_600), 7_200, &busy, &params), Verdict::Whole(w) if w.contains("does not fit beside"))
    );
    let more = Some(Prediction {
        gib: 81.0,
        source: Source::Stated,
    });
    assert!(
        matches!(decide_no_mix(&sj(more, Busy::UNKNOWN, 3_600), 7_200, &gpus, &params), Verdict::Whole(w) if w.contains("more than a GPU's 80G"))
    );
}

#[test]
fn taking_shards_slows_the_jobs_already_there() {
    let left = |g: &SharedGpu| g.co_runners.iter().map(|c| c.left_s).collect::<Vec<_>>();
    let params = ShareParams {
        interference: Interference::Constant(0.5),
        ..ShareParams::default()
    };
    let mut g = gpu("n1", 0, 8, &[]);
    g.take(3, &sj(None, Busy::UNKNOWN, 3_600), &params);
    assert_eq!((g.shards_free, left(&g)), (5, vec![3_600]));
    g.take(2, &sj(None, Busy::UNKNOWN, 3_600), &params);
    assert_eq!(g.shards_free, 3);
    assert_eq!(left(&g), vec![5_400, 5_400]);
    // Measured: a light job beside a light one slows nobody; a busy one slows both.
    let measured = ShareParams::default();
    let mut g = gpu("n1", 0, 8, &[]);
    let light = Busy {
        fraction: 0.3,
        source: BusySource::Table,
    };
    g.take(1, &sj(None, light, 3_600), &measured);
    g.take(1, &sj(None, light, 3_600), &measured);
    assert_eq!(left(&g), vec![3_600, 3_600]);
    g.take(1, &sj(None, Busy::UNKNOWN, 3_600), &measured);
    // Demand 1.6 on a capacity of 0.91: each at 0.569x.
    assert_eq!(left(&g), vec![6_330, 6_330, 6_330]);
}

#[test]
fn busy_fractions_parse_as_fractions_or_percent() {
    assert_eq!(parse_busy("0.62").unwrap(), 0.62);
    assert!((parse_busy("62%").unwrap() - 0.62).abs() < 1e-12);
    assert_eq!(parse_busy("1").unwrap(), 1.0);
    for bad in ["", "%", "busy", "0", "1.5", "150%", "-0.2", "0.001"] {
        assert!(parse_busy(bad).is_err(), "{bad} parsed");
    }
    let err = check_hints(&hints(&[("gpu_busy", "lots")]), true).unwrap_err();
    assert!(err.to_string().contains("gpu_busy"), "{err}");
    let table = ModelTable::parse_busy("bert:32=58%,resnet50=0.99").unwrap();
    assert_eq!(table.lookup("bert", Some(32)), Some(0.58));
    assert_eq!(
        table.render(|v| format!("{:.0}%", v * 100.0)),
        "bert:32=58%,resnet50=99%"
    );
    assert!(ModelTable::parse_busy("bert=10G").is_err());
}

#[test]
fn a_jobs_busy_fraction_is_its_own_report_else_the_largest_known_else_busy() {
    let table = ModelTable::parse_busy("bert=0.5").unwrap();
    let mut book = ReportBook::default();
    let h = hints(&[("app", "bert")]);
    let key = similar_key("ann", None, &h).unwrap();
    assert_eq!(
        busy_of(Some(&key), 1, &h, &ModelTable::default(), &book),
        Busy::UNKNOWN
    );
    let b = busy_of(Some(&key), 1, &h, &table, &book);
    assert_eq!((b.fraction, b.source), (0.5, BusySource::Table));
    assert_eq!(b.to_string(), "busy 50% (model table)");
    book.record_busy(&key, 7, 0.4);
    assert_eq!(
        busy_of(Some(&key), 1, &h, &table, &book).source,
        BusySource::Table
    );
    book.record_busy(&key, 8, 0.7);
    let b = busy_of(Some(&key), 1, &h, &table, &book);
    assert_eq!((b.fraction, b.source), (0.7, BusySource::Observed(2)));
    // Its own report wins, whatever others say.
    let own = hints(&[("app", "bert"), ("gpu_busy", "30%")]);
    let b = busy_of(Some(&key), 1, &own, &table, &book);
    assert_eq!((b.fraction, b.source), (0.3, BusySource::Reported));
    assert_eq!(Busy::UNKNOWN.to_string(), "busy unknown, taken as 100%");
}

#[test]
fn light_jobs_share_where_busy_ones_would_wait() {
    let params = ShareParams::default();
    let p = Some(Prediction {
        gib: 20.0,
        source: Source::Stated,
    });
    let light = |fraction| Busy {
        fraction,
        source: BusySource::Table,
    };
    let mut g = gpu("n1", 0, 8, &[]);
    g.co_runners = vec![CoRunner {
        left_s: 3_600,
        busy: 0.3,
        user: Some(1000),
    }];
    // Two light jobs: nothing added, so even a short wait for a whole GPU is not worth it.
    assert!(matches!(
        decide_no_mix(
            &sj(p, light(0.3), 3_600),
            60,
            std::slice::from_ref(&g),
            &params
        ),
        Verdict::Share { .. }
    ));
    // A busy job beside the light one slows both to 0.7x (51 min added in all): a 30 min
    // wait for a whole GPU beats that.
    assert!(matches!(
        decide_no_mix(&sj(p, Busy::UNKNOWN, 3_600), 1_800, std::slice::from_ref(&g), &params),
        Verdict::Whole(w) if w.contains("busy unknown")
    ));
}

#[test]
fn under_mps_jobs_share_faster_with_capped_memory_and_only_with_their_own_user() {
    use crate::models::corun::ShareMode;
    let mps = ShareParams {
        mode: ShareMode::Mps,
        ..ShareParams::default()
    };
    // MPS overlaps kernels: two busy jobs run at 1.13 / 2 each, not 0.91 / 2.
    assert!((mps.speed(&[1.0, 1.0]) - 1.13 / 2.0).abs() < 1e-12);
    // 25 of 100 units of an 80G GPU: a 20G cap (a 16G peak plus its share of the margin).
    assert_eq!(mps.mem_cap_gib(25, 100), 20.0);
    let p = Some(Prediction {
        gib: 16.0,
        source: Source::Stated,
    });
    let mut g = gpu("n1", 0, 8, &[3_600]);
    g.shards_free = 6;
    // The GPU holds a job of user 1000: its own user may join, another may not.
    assert!(matches!(
        decide_no_mix(
            &sj(p, Busy::UNKNOWN, 3_600),
            7_200,
            std::slice::from_ref(&g),
            &mps
        ),
        Verdict::Share { .. }
    ));
    let other = ShareJob {
        user: Some(2000),
        ..sj(p, Busy::UNKNOWN, 3_600)
    };
    assert!(matches!(
        decide_no_mix(&other, 7_200, std::slice::from_ref(&g), &mps),
        Verdict::Whole(_)
    ));
    // Shards (time-slicing) know no such rule; they are slower (2.4 h added, not 1.5 h).
    assert!(matches!(
        decide_no_mix(
            &other,
            7_200,
            std::slice::from_ref(&g),
            &ShareParams::default()
        ),
        Verdict::Whole(_)
    ));
    assert!(matches!(
        decide_no_mix(
            &other,
            9_000,
            std::slice::from_ref(&g),
            &ShareParams::default()
        ),
        Verdict::Share { .. }
    ));
    // An idle GPU takes anyone.
    let idle = gpu("n2", 0, 8, &[]);
    assert!(matches!(
        decide_no_mix(&other, 7_200, std::slice::from_ref(&idle), &mps),
        Verdict::Share { .. }
    ));
}

#[test]
fn a_mix_of_shapes_makes_a_fragment_count_as_time_and_moves_the_choice_from_best_fit() {
    // FGD's fragment, as a share of the GPU: free room too small for a shape of the mix.
    let mut mix = ShareMix::default();
    assert_eq!(mix.fragment_added(16, 8, 16), 0.0, "no mix, no fragment");
    for _ in 0..5 {
        mix.add(250); // 4 of 16 shards
    }
    mix.add(375); // 6 of 16 shards
    assert_eq!(ShareMix::milli_of(6, 16), 375);
    assert_eq!(mix.fragment_added(10, 8, 16), 2.0 / 16.0);
    let after = 4.0 / 16.0 * 375.0 / 1625.0;
    assert!((mix.fragment_added(12, 8, 16) - after).abs() < 1e-12);
    // An 8-shard job, light enough to share for free on either GPU: best fit takes n1 (2
    // shards left), the mix takes n2 (4 left, which the 4-shard jobs can use).
    let co = |shards_free| SharedGpu {
        node: String::new(),
        index: 0,
        shards_total: 16,
        shards_free,
        co_runners: vec![CoRunner {
            left_s: 3_600,
            busy: 0.3,
            user: Some(1000),
        }],
    };
    let gpus = [
        SharedGpu {
            node: "n1".into(),
            ..co(10)
        },
        SharedGpu {
            node: "n2".into(),
            ..co(12)
        },
    ];
    let job = sj(
        Some(Prediction {
            gib: 36.0,
            source: Source::Stated,
        }),
        Busy {
            fraction: 0.3,
            source: BusySource::Table,
        },
        3_600,
    );
    let params = ShareParams::default();
    let node = |mix: &ShareMix| match decide(&job, 0, &gpus, mix, &params) {
        Verdict::Share {
            node, shards: 8, ..
        } => node,
        other => panic!("{other:?}"),
    };
    assert_eq!(node(&ShareMix::default()), "n1");
    assert_eq!(node(&mix), "n2");
    // With a whole GPU free, a job that slows its neighbour (busy 0.7 beside 0.3: 12 min
    // added in all) still goes beside it when an idle GPU would keep half a GPU that the
    // whole-GPU shapes of the mix cannot use (24 min of their time); the reason says so.
    let mut halves = ShareMix::default();
    halves.add(1000);
    halves.add(500);
    let busier = ShareJob {
        busy: Busy {
            fraction: 0.7,
            source: BusySource::Table,
        },
        ..job
    };
    let idle = SharedGpu {
        node: "n3".into(),
        shards_free: 16,
        co_runners: Vec::new(),
        ..co(16)
    };
    let half = SharedGpu {
        node: "n1".into(),
        ..co(8)
    };
    let gpus = [idle, half];
    match decide(&busier, 0, &gpus, &halves, &params) {
        Verdict::Share { node, why, .. } => {
            assert_eq!(node, "n1");
            assert!(
                why.contains("beside them rather than on an idle shared GPU"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    match decide_no_mix(&busier, 0, &gpus, &params) {
        Verdict::Share { node, why, .. } => {
            assert_eq!(node, "n3", "no mix: the idle GPU, which slows no one");
            assert!(!why.contains("beside them"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}
