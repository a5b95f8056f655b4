//! cinch's three modes, shared by cinch.conf, the optimizer's policy settings and the apply path.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What cinch may do to jobs (the same three modes as cinch.conf's `Mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Decide nothing.
    Off,
    /// Decide and report, apply nothing.
    #[default]
    Shadow,
    /// Decide and apply.
    Enforce,
}

impl std::str::FromStr for Mode {
    type Err = ();
    /// `off`, `shadow`, `enforce`, in any case (as cinch.conf writes them).
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(Mode::Off),
            "shadow" => Ok(Mode::Shadow),
            "enforce" => Ok(Mode::Enforce),
            _ => Err(()),
        }
    }
}

impl Mode {
    /// The stricter of two modes (off < shadow < enforce): what holds when cinch.conf and the
    /// optimizer disagree.
    pub fn stricter(self, other: Mode) -> Mode {
        let rank = |m: Mode| match m {
            Mode::Off => 0,
            Mode::Shadow => 1,
            Mode::Enforce => 2,
        };
        if rank(self) <= rank(other) {
            self
        } else {
            other
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Off => "off",
            Mode::Shadow => "shadow",
            Mode::Enforce => "enforce",
        })
    }
}
