//! The one guard every exported entry point of cinch's two Slurm plugins (job_submit and SPANK)
//! runs inside: a panic or an error in cinch becomes an outcome the FFI layer can log and turn
//! into a Slurm return code, with the panic's message and place. Nothing unwinds into C.

use std::cell::RefCell;
use std::os::raw::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

/// Why an entry point did not finish normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Refuse the request on purpose: `user_message` reaches the user through `err_msg`.
    #[error("rejected ({code}): {user_message}")]
    Reject { code: c_int, user_message: String },
    /// cinch itself failed: logged for the admin, and the request passes as if cinch were absent.
    #[error("{0}")]
    Internal(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done(c_int),
    Rejected { code: c_int, user_message: String },
    Failed(String),
    Panicked(String),
}

thread_local! {
    /// Filled by the panic hook: the message *and* where it happened, which the unwind payload
    /// alone does not carry.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Routes panic reports to [`run`] instead of stderr (slurmctld's stderr is often /dev/null).
/// The hook belongs to this plugin's own copy of std, so it affects no other code in slurmctld.
pub fn install_panic_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let report = info.to_string().replace('\n', " ");
            // try_with: during thread teardown the slot may be gone; losing the location is fine.
            let _ = LAST_PANIC.try_with(|slot| *slot.borrow_mut() = Some(report));
        }));
    });
}

/// Runs `body`, catching any panic.
pub fn run<F>(body: F) -> Outcome
where
    F: FnOnce() -> Result<c_int, EntryError>,
{
    // AssertUnwindSafe: after a panic the entry point's work is abandoned and the caller gets the
    // fallback return code; no state the closure touched is used again.
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(rc)) => Outcome::Done(rc),
        Ok(Err(EntryError::Reject { code, user_message })) => {
            Outcome::Rejected { code, user_message }
        }
        Ok(Err(EntryError::Internal(message))) => Outcome::Failed(message),
        Err(payload) => {
            let hooked = LAST_PANIC
                .try_with(|slot| slot.borrow_mut().take())
                .ok()
                .flatten();
            let message = hooked.unwrap_or_else(|| {
                payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic with a non-string payload".to_string())
            });
            Outcome::Panicked(message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_to_outcomes() {
        assert_eq!(run(|| Ok(0)), Outcome::Done(0));
        assert_eq!(
            run(|| Err(EntryError::Reject {
                code: 2072,
                user_message: "no".into()
            })),
            Outcome::Rejected {
                code: 2072,
                user_message: "no".into()
            }
        );
        assert_eq!(
            run(|| Err(EntryError::Internal("broken".into()))),
            Outcome::Failed("broken".into())
        );
    }

    #[test]
    fn a_panic_is_caught_with_its_message_and_location() {
        install_panic_hook();
        let outcome = run(|| panic!("deliberate {}", 42));
        let Outcome::Panicked(message) = outcome else {
            panic!("expected Panicked, got {outcome:?}");
        };
        assert!(message.contains("deliberate 42"), "{message}");
        assert!(message.contains("lib.rs"), "location missing: {message}");
    }

    #[test]
    fn a_panic_without_the_hook_still_yields_its_payload() {
        // Other tests may have installed the hook; either way the message must be there.
        let Outcome::Panicked(message) = run(|| std::panic::panic_any(String::from("owned")))
        else {
            panic!("expected Panicked");
        };
        assert!(message.contains("owned"), "{message}");
    }
}
