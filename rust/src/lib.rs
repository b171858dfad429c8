//! TileRosetta's cuTile-rs backend.
//!
//! * `args`: plain-integer arguments from Python and the memory-safety checks (no GPU needed).
//! * `generated`: the op table generated from the specs (`python -m tilerosetta.codegen`).
//! * `config`: the tile-size tables.
//! * `ops`: one file per op with its kernel (`#[cutile::module]`), plan and launch.
//! * `runtime`: borrowing torch's context, stream and memory.
//! * `compile`: driver-free compilation of every kernel to Tile IR bytecode (tests, warm-up checks).
//! * `python` (feature "python"): the PyO3 module `tilerosetta_cutile_rs`.

pub mod args;
pub mod generated;
pub mod compile;
pub mod config;
pub mod ops;
pub mod runtime;

#[cfg(feature = "python")]
mod python;
