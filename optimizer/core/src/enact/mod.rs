//! From decisions to Slurm: the one apply path, the agent's round that the plugin and the simulator
//! both run, and the AdminComment record.

pub mod admin_comment;
pub mod apply;
pub mod round;
