/* The public Slurm API as installed on the build machine (libslurm-dev). */
#include <stdint.h>
#include <stdbool.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>

/*
 * Records that the topology RPC's answer carries but the public headers do not declare: the
 * topology plugins' own (src/plugins/topology/tree/topology_tree.c and .../block/topology_block.c)
 * and, from 25.11, the wrapper the answer's `void *topo_info` points at
 * (src/common/dynamic_plugin_data.h). Restated here from each release's source (read at the tags
 * 23.11.11, 24.05.8, 24.11.7, 25.05.8, 25.11.7 and 26.05.3) so that bindgen lays them out and
 * checks the layout like every public type, instead of hand-written Rust structs.
 */
typedef struct {
	uint32_t record_count;
	topo_info_t *topo_array;
} cinch_topoinfo_tree_t;

#if SLURM_VERSION_NUMBER >= 0x180b00
/* 24.11 added `aggregated` and `size`. */
typedef struct {
	bool aggregated;
	uint16_t block_index;
	char *name;
	char *nodes;
	uint32_t size;
} cinch_topoinfo_bblock_t;
#else
typedef struct {
	uint16_t block_index;
	char *name;
	char *nodes;
} cinch_topoinfo_bblock_t;
#endif

typedef struct {
	uint32_t record_count;
	cinch_topoinfo_bblock_t *topo_array;
} cinch_topoinfo_block_t;

#if SLURM_VERSION_NUMBER >= 0x190b00
/* 25.11 took dynamic_plugin_data_t out of slurm.h; the answer still holds one. */
typedef struct {
	void *data;
	uint32_t plugin_id;
} cinch_plugin_data_t;
#endif
