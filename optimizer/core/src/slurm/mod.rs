//! Slurm's own notations, parsed in one place: hostlists, GRES strings, Slurm's time formats,
//! `scontrol show` text, and the hints users write into a job's comment.

pub mod gres;
pub mod hostlist;
pub mod job_hints;
pub mod order;
pub mod scontrol;
pub mod slurm_time;
