//! The plugin and the SPANK plugin build against every Slurm release cinch supports, and each
//! build says it is for that release (`plugin_version`, which slurmctld compares with its own
//! major.minor.micro before it loads a job_submit plugin).
//!
//! The header sets are Slurm's public headers per release in `../shared/slurm/headers/VERSION`
//! (23.11 to 26.05; not in a newcomer's clone, so these tests then report themselves ignored).
//! Debian's releases are built by `tests/run`: 22.05 (the host's) by the workspace build, 24.11
//! and 26.05 in their roots before their end-to-end passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// One build at a time: they share a target directory (the dependencies are built once), and a
/// build's artefacts are read before the next overwrites them.
static BUILD: Mutex<()> = Mutex::new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn headers(version: &str) -> PathBuf {
    let shared = std::env::var_os("CINCH_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared"));
    shared.join("slurm/headers").join(version)
}

/// The value of a 4-byte read-only symbol in a shared object (`objdump`: its address, and the
/// file offset of the section that holds it).
fn u32_symbol(so: &Path, symbol: &str) -> u32 {
    let run = |args: &[&str]| {
        let out = Command::new("objdump")
            .args(args)
            .arg(so)
            .output()
            .expect("objdump (binutils) runs");
        assert!(out.status.success(), "objdump {args:?} failed");
        String::from_utf8(out.stdout).expect("objdump writes text")
    };
    // `ADDRESS g     O .rodata  SIZE  NAME`
    let symbols = run(&["-t"]);
    let line = symbols
        .lines()
        .find(|l| l.split_whitespace().last() == Some(symbol))
        .unwrap_or_else(|| panic!("{} has no symbol {symbol}", so.display()));
    let fields: Vec<&str> = line.split_whitespace().collect();
    let address = u64::from_str_radix(fields[0], 16).expect("a hex address");
    let section = *fields
        .iter()
        .find(|f| f.starts_with('.'))
        .expect("the symbol's section");
    // `IDX NAME SIZE VMA LMA FILE-OFFSET ALIGN`
    let sections = run(&["-h", "-j", section]);
    let header: Vec<&str> = sections
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(section))
        .expect("the section's header")
        .split_whitespace()
        .collect();
    let vma = u64::from_str_radix(header[3], 16).expect("a hex VMA");
    let offset = u64::from_str_radix(header[5], 16).expect("a hex file offset");
    let bytes = std::fs::read(so).expect("the built plugin is readable");
    let at = usize::try_from(address - vma + offset).expect("an offset in the file");
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Builds both plugins against one release's headers and checks what each says it is for.
fn builds_for(version: &str) {
    let include = headers(version);
    assert!(
        include.join("slurm/slurm.h").is_file(),
        "no Slurm headers in {}",
        include.display()
    );
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("slurm-headers");
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let status = Command::new(env!("CARGO"))
        .current_dir(workspace())
        .args([
            "build",
            "--quiet",
            "-p",
            "cinch-plugin",
            "-p",
            "cinch-spank",
        ])
        .env("SLURM_INCLUDE_DIR", &include)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "the plugins do not build against Slurm {version}'s headers"
    );
    let numbers: Vec<u32> = version
        .split('.')
        .map(|p| p.parse().expect("a number"))
        .collect();
    let expected = (numbers[0] << 16) | (numbers[1] << 8) | numbers[2];
    for so in ["libjob_submit_cinch.so", "libspank_cinch.so"] {
        let built = u32_symbol(&target.join("debug").join(so), "plugin_version");
        assert_eq!(
            built, expected,
            "{so} built against {version}'s headers says plugin_version {built:#x}, not {expected:#x}"
        );
        eprintln!("{so}: built for Slurm {version} (plugin_version {built:#08x})");
    }
}

macro_rules! release {
    ($name:ident, $version:literal) => {
        #[test]
        #[cfg_attr(
            not(shared_slurm_headers),
            ignore = "needs Slurm's headers per release in ../shared/slurm/headers (not in a fresh clone)"
        )]
        fn $name() {
            builds_for($version);
        }
    };
}

release!(builds_for_slurm_23_11, "23.11.11");
release!(builds_for_slurm_24_05, "24.05.8");
release!(builds_for_slurm_24_11, "24.11.7");
release!(builds_for_slurm_25_05, "25.05.8");
release!(builds_for_slurm_25_11, "25.11.7");
release!(builds_for_slurm_26_05, "26.05.3");
