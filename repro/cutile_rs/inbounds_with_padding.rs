// tileiras 13.4 refuses a partition-view load that declares an axis in bounds (`inbounds` true) when the
// view has a padding value: exit 5, "failed to compile Tile IR program", no diagnostic (sm_90, any -O).
// The three entries load one (1, 16, 1) tile of a (1, S, M) f32 view and store it; they differ only in the
// view's padding and the load's flags. Compiled by rust/tests/upstream_inbounds.rs (no GPU); the report is
// docs/upstream/tile-ir-inbounds-with-padding.md.
#[cutile::module]
pub mod repro {
    use cutile::core::*;

    /// Zero padding, no axis declared in bounds: compiles.
    #[cutile::entry()]
    pub fn padded_fff(out: &mut Tensor<f32, { [1, 16] }>, x: &Tensor<f32, { [-1, -1, -1] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let part: Partition<f32, { [1, 16, 1] }> =
            unsafe { make_partition_view(x, shape![1, 16, 1], padding::Zero, dim_map::Identity, x.token()) };
        let (t, _done): (Tile<f32, { [1, 16, 1] }>, Token) = unsafe {
            load_view_raw(&part, [0i32, 0i32, pid.0], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [false, false, false], shape![1, 16, 1])
        };
        out.store(t.reshape(shape![1, 16]));
    }

    /// Zero padding on the middle axis's ragged end, the other two axes declared in bounds: exit 5.
    #[cutile::entry()]
    pub fn padded_tft(out: &mut Tensor<f32, { [1, 16] }>, x: &Tensor<f32, { [-1, -1, -1] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let part: Partition<f32, { [1, 16, 1] }> =
            unsafe { make_partition_view(x, shape![1, 16, 1], padding::Zero, dim_map::Identity, x.token()) };
        let (t, _done): (Tile<f32, { [1, 16, 1] }>, Token) = unsafe {
            load_view_raw(&part, [0i32, 0i32, pid.0], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, false, true], shape![1, 16, 1])
        };
        out.store(t.reshape(shape![1, 16]));
    }

    /// The same flags on a view without a padding value: compiles.
    #[cutile::entry()]
    pub fn unpadded_tft(out: &mut Tensor<f32, { [1, 16] }>, x: &Tensor<f32, { [-1, -1, -1] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let part: Partition<f32, { [1, 16, 1] }> =
            unsafe { make_partition_view(x, shape![1, 16, 1], padding::None, dim_map::Identity, x.token()) };
        let (t, _done): (Tile<f32, { [1, 16, 1] }>, Token) = unsafe {
            load_view_raw(&part, [0i32, 0i32, pid.0], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, false, true], shape![1, 16, 1])
        };
        out.store(t.reshape(shape![1, 16]));
    }
}
