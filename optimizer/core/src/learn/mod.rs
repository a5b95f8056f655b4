//! What cinch learns from the jobs that ended here: the history and the run-time model built on it.

pub mod history;
pub mod record;
pub mod run_model;

/// What the history derives from what it knows, kept beside it to spare work (the run model,
/// the latest predictions): not part of what it knows, so a clone starts empty and every one
/// compares equal.
#[derive(Default)]
pub(crate) struct Derived<T>(pub(crate) std::sync::Mutex<T>);

impl<T: Default> Clone for Derived<T> {
    fn clone(&self) -> Self {
        Derived::default()
    }
}

impl<T> PartialEq for Derived<T> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<T> std::fmt::Debug for Derived<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Derived")
    }
}
