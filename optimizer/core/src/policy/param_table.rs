//! One declaration per policy parameter: [`param_table!`](crate::param_table) takes each
//! parameter's name, type, default, range and doc once and yields the parameters' struct (its
//! wire form: serde, unknown fields refused, omitted ones defaulted), its `Default`, the range
//! checks of its `validate` and the table the docs show ([`ParamDoc`], rendered into
//! docs/policies/parameters.md and checked against it by a test). A check that is more than a
//! range (a list's order, a QoS class that must parse) stays in the policy's own `validate`,
//! after the table's.

use thiserror::Error;

/// Why a policy's parameter is refused. Its text is what admins read from `cinch policy set`.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ParamError {
    /// Outside its declared range.
    #[error("{name} must be from {min} to {max}{note}, not {value}")]
    OutOfRange {
        name: &'static str,
        min: f64,
        max: f64,
        /// Why the range is what it is (" (7 days)"), or empty.
        note: &'static str,
        value: f64,
    },
    /// Below its declared least value.
    #[error("{name} must be at least {min}, not {value}")]
    TooSmall {
        name: &'static str,
        min: f64,
        value: f64,
    },
    /// Refused by a policy's own check (more than a range).
    #[error("{name}: {why}")]
    Invalid { name: &'static str, why: String },
}

/// One parameter as its table declares it, for the docs.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamDoc {
    pub name: &'static str,
    /// The default as the wire form writes it (JSON).
    pub default: String,
    /// The accepted values, if the table bounds them ("0–100", "≥ 1").
    pub range: Option<String>,
    pub doc: String,
}

/// A parameter value a range applies to: a number, or an optional one (unset is always in
/// range).
pub trait Bounded {
    fn value(&self) -> Option<f64>;
}

impl Bounded for u32 {
    fn value(&self) -> Option<f64> {
        Some(f64::from(*self))
    }
}

impl Bounded for f64 {
    fn value(&self) -> Option<f64> {
        Some(*self)
    }
}

impl<T: Bounded> Bounded for Option<T> {
    fn value(&self) -> Option<f64> {
        self.as_ref().and_then(Bounded::value)
    }
}

/// `value` within `min..=max` (NaN is not).
pub fn range(
    name: &'static str,
    value: &impl Bounded,
    min: f64,
    max: f64,
    note: &'static str,
) -> Result<(), ParamError> {
    match value.value() {
        Some(v) if !(min..=max).contains(&v) => Err(ParamError::OutOfRange {
            name,
            min,
            max,
            note,
            value: v,
        }),
        _ => Ok(()),
    }
}

/// `value` at least `min`.
pub fn at_least(name: &'static str, value: &impl Bounded, min: f64) -> Result<(), ParamError> {
    match value.value() {
        Some(v) if v < min || v.is_nan() => Err(ParamError::TooSmall {
            name,
            min,
            value: v,
        }),
        _ => Ok(()),
    }
}

/// How a table's range reads in the docs.
pub fn describe_range(min: f64, max: Option<f64>) -> String {
    match max {
        Some(max) => format!("{min}–{max}"),
        None => format!("≥ {min}"),
    }
}

/// The docs' table of one policy's parameters (markdown).
pub fn markdown(policy: &str, table: &[ParamDoc]) -> String {
    let mut out = format!("### `{policy}`\n\n");
    if table.is_empty() {
        out.push_str("No parameters.\n");
        return out;
    }
    out.push_str("| parameter | default | range | what it does |\n|---|---|---|---|\n");
    for p in table {
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} |\n",
            p.name,
            p.default,
            p.range.as_deref().unwrap_or(""),
            p.doc.replace('|', "\\|")
        ));
    }
    out
}

/// Declares a policy's parameters once (see the module's doc):
///
/// ```text
/// param_table! {
///     /// The struct's doc.
///     pub struct EdfParams {
///         /// Lifetime of each decision in seconds.
///         ttl_s: u32 = 300, range(1, 86_400);
///         /// Least run assumed.
///         default_run_s: u32 = 3600, at_least(1);
///         /// A switch.
///         preempt: bool = true;
///     }
/// }
/// ```
///
/// `range(MIN, MAX)` may take a third argument, a note the error and the docs give after the
/// range (`" (7 days)"`). Extra derives go before `pub struct`.
#[macro_export]
macro_rules! param_table {
    (
        $(#[doc = $struct_doc:literal])*
        $(#[derive($($derive:ident),*)])?
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])+
                $field:ident : $ty:ty = $default:expr
                    $(, $check:ident ( $($arg:expr),* ))? ;
            )*
        }
    ) => {
        $(#[doc = $struct_doc])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize $($(, $derive)*)?)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $(
                $(#[doc = $doc])+
                pub $field: $ty,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: $default, )*
                }
            }
        }

        impl $name {
            /// The parameters with their defaults, ranges and docs, in declaration order.
            pub fn table() -> Vec<$crate::policy::param_table::ParamDoc> {
                // (Unused by a table without parameters.)
                #[allow(unused_variables)]
                let defaults = serde_json::to_value(Self::default())
                    .expect("policy parameters serialise");
                vec![
                    $( $crate::policy::param_table::ParamDoc {
                        name: stringify!($field),
                        default: defaults[stringify!($field)].to_string(),
                        range: $crate::param_table!(@describe $($check($($arg),*))?),
                        doc: [$($doc.trim()),+].join(" "),
                    }, )*
                ]
            }

            /// The declared ranges, in declaration order.
            pub fn check_ranges(&self) -> Result<(), $crate::policy::param_table::ParamError> {
                $( $( $crate::param_table!(@check $check, stringify!($field), &self.$field, $($arg),*)?; )? )*
                Ok(())
            }
        }
    };
    (@check range, $name:expr, $value:expr, $min:expr, $max:expr) => {
        $crate::policy::param_table::range($name, $value, f64::from($min), f64::from($max), "")
    };
    (@check range, $name:expr, $value:expr, $min:expr, $max:expr, $note:expr) => {
        $crate::policy::param_table::range($name, $value, f64::from($min), f64::from($max), $note)
    };
    (@check at_least, $name:expr, $value:expr, $min:expr) => {
        $crate::policy::param_table::at_least($name, $value, f64::from($min))
    };
    (@describe) => { None };
    (@describe range($min:expr, $max:expr $(, $note:expr)?)) => {
        Some(format!(
            "{}{}",
            $crate::policy::param_table::describe_range(f64::from($min), Some(f64::from($max))),
            "" $(.to_string() + $note)?
        ))
    };
    (@describe at_least($min:expr)) => {
        Some($crate::policy::param_table::describe_range(f64::from($min), None))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::param_table! {
        /// A table to test the table with.
        pub struct Example {
            /// Seconds.
            ttl_s: u32 = 300, range(1, 86_400);
            /// A timer, unset by default.
            /// On two lines.
            timer_s: Option<u32> = None, range(0, 604_800, " (7 days)");
            /// A share.
            share: f64 = 0.5, range(0.0, 1.0);
            /// A least run.
            run_s: u32 = 3600, at_least(1);
            /// A switch.
            on: bool = true;
        }
    }

    #[test]
    fn the_table_yields_defaults_checks_and_docs() {
        let ok = Example::default();
        assert_eq!(
            (ok.ttl_s, ok.timer_s, ok.share, ok.run_s, ok.on),
            (300, None, 0.5, 3600, true)
        );
        assert_eq!(ok.check_ranges(), Ok(()));
        let bad = |f: fn(&mut Example)| {
            let mut e = Example::default();
            f(&mut e);
            e.check_ranges().unwrap_err().to_string()
        };
        assert_eq!(bad(|e| e.ttl_s = 0), "ttl_s must be from 1 to 86400, not 0");
        assert_eq!(
            bad(|e| e.timer_s = Some(700_000)),
            "timer_s must be from 0 to 604800 (7 days), not 700000"
        );
        assert_eq!(
            bad(|e| e.share = f64::NAN),
            "share must be from 0 to 1, not NaN"
        );
        assert_eq!(bad(|e| e.run_s = 0), "run_s must be at least 1, not 0");
        // The wire form: omitted fields default, unknown ones are refused.
        let parsed: Example = serde_json::from_str(r#"{"share": 0.25}"#).unwrap();
        assert_eq!(
            parsed,
            Example {
                share: 0.25,
                ..Example::default()
            }
        );
        assert!(serde_json::from_str::<Example>(r#"{"shares": 1}"#).is_err());
        // The docs' table.
        let table = Example::table();
        let row = |name: &str| table.iter().find(|p| p.name == name).unwrap().clone();
        assert_eq!(row("ttl_s").range.as_deref(), Some("1–86400"));
        assert_eq!(row("timer_s").default, "null");
        assert_eq!(row("timer_s").range.as_deref(), Some("0–604800 (7 days)"));
        assert_eq!(
            row("timer_s").doc,
            "A timer, unset by default. On two lines."
        );
        assert_eq!(row("run_s").range.as_deref(), Some("≥ 1"));
        assert_eq!(row("on").range, None);
        let md = markdown("example", &table);
        assert!(md.contains("| `share` | `0.5` | 0–1 | A share. |"), "{md}");
    }
}
