//! What cinch learns from the jobs that ended here: the history and the run-time model built on it.

pub mod history;
pub mod record;
pub mod run_model;
