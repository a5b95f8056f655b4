//! The training applications cinch knows by name (`app=` hint): how much each slows down spread
//! over nodes. Read by the policies that place by it and by the hint checks that list the names.

/// Fraction of training speed each application loses when 8 GPUs sit on 2 nodes instead of one
/// (1 - step time on one node / step time on two), at its median measured batch size on the
/// measured network. Derived from the step-time model the simulator fits to the Pollux
/// artifact's `placements.csv`/`scalability.csv` (optimizer/sim/src/perf.rs; a test there
/// recomputes this table). cifar10's intra-node sync is slower than its inter-node one: 0.
pub const APP_SLOWDOWN: [(&str, f64); 6] = [
    ("bert", 0.487),
    ("cifar10", 0.0),
    ("deepspeech2", 0.108),
    ("imagenet", 0.191),
    ("ncf", 0.414),
    ("yolov3", 0.470),
];

/// The measured slowdown of a named application (`app=` hint), if cinch knows it.
pub fn app_slowdown(app: &str) -> Option<f64> {
    let app = app.to_ascii_lowercase();
    APP_SLOWDOWN
        .iter()
        .find(|(name, _)| *name == app)
        .map(|&(_, s)| s)
}
