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

/// How many host names a Slurm host list names (`n[1-16],gpu[01-04,07]`, `a,b`), by the
/// core's one reading of host lists.
fn hostlist_len(list: &str) -> Result<u32, String> {
    cinch_core::slurm::hostlist::count(list)
        .map(|n| n.min(u64::from(u32::MAX)) as u32)
        .map_err(|_| format!("'{list}' is not a host list"))
}

/// `key=value` words of one slurm.conf-style line (keys case-insensitive, as Slurm reads them).
fn conf_words(line: &str) -> Vec<(String, &str)> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect()
}

impl ClusterSpec {
    /// A site's GPU cluster as the simulator models it, from its slurm.conf (the `NodeName`
    /// lines, with `NodeName=DEFAULT` lines' Gres) and, when given, topology.conf (each switch
    /// with `Nodes=` is a rack). The simulator's nodes are alike: nodes without GPUs are left out
    /// and, when GPU counts differ, the most common count is used; what was left out is said in
    /// the notes returned beside the shape.
    pub fn from_slurm_conf(
        slurm_conf: &str,
        topology_conf: Option<&str>,
    ) -> Result<(ClusterSpec, Vec<String>), String> {
        let mut default_gres = String::new();
        // (GPUs per node, nodes)
        let mut groups: Vec<(u32, u32)> = Vec::new();
        for line in slurm_conf.lines() {
            let line = line.split('#').next().unwrap_or("");
            let words = conf_words(line);
            let Some((_, name)) = words.iter().find(|(k, _)| k == "nodename") else {
                continue;
            };
            let gres = words.iter().find(|(k, _)| k == "gres").map(|(_, v)| *v);
            if name.eq_ignore_ascii_case("default") {
                if let Some(g) = gres {
                    default_gres = g.to_string();
                }
                continue;
            }
            let gpus = cinch_core::slurm::gres::node_gpus(gres.unwrap_or(&default_gres));
            let nodes = hostlist_len(name)?;
            match groups.iter_mut().find(|(g, _)| *g == gpus) {
                Some((_, n)) => *n += nodes,
                None => groups.push((gpus, nodes)),
            }
        }
        let mut notes = Vec::new();
        let without: u32 = groups.iter().filter(|(g, _)| *g == 0).map(|(_, n)| n).sum();
        if without > 0 {
            notes.push(format!("{without} nodes without GPUs left out"));
        }
        groups.retain(|(g, _)| *g > 0);
        groups.sort_by_key(|&(g, n)| (std::cmp::Reverse(n), std::cmp::Reverse(g)));
        let &(gpus_per_node, nodes) = groups
            .first()
            .ok_or("slurm.conf has no NodeName line with GPUs (Gres=gpu:N)")?;
        for (g, n) in &groups[1..] {
            notes.push(format!(
                "{n} nodes with {g} GPUs left out (the simulator's nodes are alike; {nodes} nodes have {gpus_per_node})"
            ));
        }
        let leaves = topology_conf.map_or(0, |t| {
            t.lines()
                .map(|l| conf_words(l.split('#').next().unwrap_or("")))
                .filter(|w| {
                    w.iter().any(|(k, _)| k == "switchname") && w.iter().any(|(k, _)| k == "nodes")
                })
                .count() as u32
        });
        let racks = leaves.clamp(1, nodes);
        if topology_conf.is_none() {
            notes.push("no topology.conf: one rack".into());
        }
        let spec = ClusterSpec {
            nodes,
            gpus_per_node,
            racks,
        };
        spec.validate()?;
        Ok((spec, notes))
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

    #[test]
    fn a_sites_shape_comes_from_its_slurm_conf_and_topology() {
        assert_eq!(hostlist_len("r[1-2]n[1-3]"), Ok(6));
        assert_eq!(
            hostlist_len("n[3-1]").unwrap_err(),
            "'n[3-1]' is not a host list"
        );
        let conf = "NodeName=DEFAULT Gres=gpu:a100:4 CPUs=64\n\
                    NodeName=g[1-30] State=UNKNOWN # four each\n\
                    NodeName=g[31-32] Gres=gpu:8\n\
                    NodeName=login[1-2] Gres=\n\
                    nodename=big1 gres=gpu:a100:4,shard:64\n";
        let topo = "SwitchName=s1 Nodes=g[1-16]\nSwitchName=s2 Nodes=g[17-32]\nSwitchName=top Switches=s[1-2]\n";
        let (spec, notes) = ClusterSpec::from_slurm_conf(conf, Some(topo)).unwrap();
        assert_eq!((spec.nodes, spec.gpus_per_node, spec.racks), (31, 4, 2));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("2 nodes without GPUs"));
        assert!(notes[1].contains("2 nodes with 8 GPUs"));
        let (one, notes) =
            ClusterSpec::from_slurm_conf("NodeName=n[1-4] Gres=gpu:2\n", None).unwrap();
        assert_eq!((one.nodes, one.racks), (4, 1));
        assert!(notes[0].contains("one rack"));
        assert!(
            ClusterSpec::from_slurm_conf("NodeName=c[1-4] CPUs=8\n", None)
                .unwrap_err()
                .contains("no NodeName line with GPUs")
        );
    }
}
