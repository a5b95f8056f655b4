//! The simulated cluster's shape: identical nodes of N GPUs, split evenly into racks (leaf
//! switches of a 2-level tree: a job inside one rack talks over one switch, across racks over
//! the spine).

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub racks: u32,
}

impl Default for ClusterSpec {
    /// 16 nodes x 8 GPUs in 2 racks: the local demo cluster's shape.
    fn default() -> Self {
        ClusterSpec {
            nodes: 16,
            gpus_per_node: 8,
            racks: 2,
        }
    }
}

impl ClusterSpec {
    /// `NODESxGPUS` (e.g. `64x8`) in `racks` racks.
    pub fn parse(shape: &str, racks: u32) -> Result<ClusterSpec, String> {
        let bad = || format!("cluster '{shape}' is not NODESxGPUS (e.g. 64x8)");
        let (n, g) = shape.split_once(['x', 'X']).ok_or_else(bad)?;
        let spec = ClusterSpec {
            nodes: n.trim().parse().map_err(|_| bad())?,
            gpus_per_node: g.trim().parse().map_err(|_| bad())?,
            racks,
        };
        spec.validate()?;
        Ok(spec)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=100_000).contains(&self.nodes) {
            return Err(format!(
                "nodes must be from 1 to 100000, not {}",
                self.nodes
            ));
        }
        if !(1..=64).contains(&self.gpus_per_node) {
            return Err(format!(
                "GPUs per node must be from 1 to 64, not {}",
                self.gpus_per_node
            ));
        }
        if self.racks == 0 || self.racks > self.nodes {
            return Err(format!(
                "racks must be from 1 to the number of nodes ({}), not {}",
                self.nodes, self.racks
            ));
        }
        Ok(())
    }

    /// Nodes in the largest rack.
    pub fn nodes_per_rack(&self) -> u32 {
        self.nodes.div_ceil(self.racks.max(1))
    }

    /// The most consolidated shape a job of `gpus` GPUs can have here.
    pub fn ideal_shape(&self, gpus: u32) -> crate::perf::Shape {
        crate::perf::ideal_shape(gpus, self.gpus_per_node, self.nodes_per_rack())
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// Racks are contiguous blocks of nodes, as near equal in size as the counts allow.
    pub fn rack_of(&self, node: u32) -> u32 {
        (u64::from(node) * u64::from(self.racks) / u64::from(self.nodes)) as u32
    }

    pub fn node_name(node: u32) -> String {
        format!("n{}", node + 1)
    }

    pub fn rack_name(rack: u32) -> String {
        format!("rack{}", rack + 1)
    }
}

impl fmt::Display for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{} GPUs in {} rack{}",
            self.nodes,
            self.gpus_per_node,
            self.racks,
            if self.racks == 1 { "" } else { "s" }
        )
    }
}

impl FromStr for ClusterSpec {
    type Err = String;
    /// `NODESxGPUS` with one rack per 8 nodes (at least one).
    fn from_str(s: &str) -> Result<Self, String> {
        let one_rack = ClusterSpec::parse(s, 1)?;
        ClusterSpec::parse(s, one_rack.nodes.div_ceil(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_racks_split_evenly() {
        let c = ClusterSpec::parse("64x8", 2).unwrap();
        assert_eq!(c.total_gpus(), 512);
        assert_eq!(
            (c.rack_of(0), c.rack_of(31), c.rack_of(32), c.rack_of(63)),
            (0, 0, 1, 1)
        );
        let c = ClusterSpec::parse("5x4", 2).unwrap();
        let racks: Vec<u32> = (0..5).map(|n| c.rack_of(n)).collect();
        assert_eq!(racks, vec![0, 0, 0, 1, 1]);
        assert!(ClusterSpec::parse("64", 2)
            .unwrap_err()
            .contains("NODESxGPUS"));
        assert!(ClusterSpec::parse("4x8", 5).unwrap_err().contains("racks"));
        assert!(ClusterSpec::parse("0x8", 1).is_err());
    }
}
