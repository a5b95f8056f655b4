//! Tells the tests whether the shared data sets are beside this clone (`../shared/traces`,
//! `../shared/pollux`, `../shared/gpu`, or under `$CINCH_SHARED`): tests that read them are reported as ignored,
//! with the reason, when they are absent (a newcomer's clone), and run when they are present.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(shared_traces, shared_pollux, shared_gpu)");
    println!("cargo:rerun-if-env-changed=CINCH_SHARED");
    let base = std::env::var_os("CINCH_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
                .join("../../../shared")
        });
    // Watching a directory makes cargo walk it on every build, so only the small shared/ itself
    // is watched, when it is there. Without it, data added later is seen after `touch
    // optimizer/sim/build.rs` (or in a fresh clone, as CI makes).
    println!("cargo:rerun-if-changed=build.rs");
    if base.is_dir() {
        println!("cargo:rerun-if-changed={}", base.display());
    }
    for (name, cfg) in [
        ("traces", "shared_traces"),
        ("pollux", "shared_pollux"),
        ("gpu", "shared_gpu"),
    ] {
        if base.join(name).is_dir() {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
