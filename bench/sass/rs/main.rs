use tilerosetta_cutile_rs::args::DType;
use tilerosetta_cutile_rs::compile::{assemble_cubin, bytecode};
use tilerosetta_cutile_rs::{config, ops};
fn dump(name: &str, op: &'static str, dims: Vec<i32>, ov: Vec<(&'static str, i64)>) {
    let named: Vec<(&str, i64)> = ops::dim_names(op).iter().zip(&dims).map(|(k, v)| (*k, *v as i64)).collect();
    let given: Vec<(String, i64)> = ov.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let cfg = config::resolve(op, DType::BF16, &named, &given).unwrap();
    for (i, spec) in ops::specs(op, DType::BF16, &cfg, &dims).unwrap().into_iter().enumerate() {
        let bc = bytecode(&spec, DType::BF16, "sm_90").unwrap();
        let c = assemble_cubin(&bc, "sm_90", &format!("{name}_{i}")).unwrap();
        std::fs::write(format!("/tmp/sass/rs/{name}_{i}.cubin"), c).unwrap();
        println!("{name}_{i} {} {cfg:?}", spec.function);
    }
}
fn main() {
    std::thread::Builder::new().stack_size(64 << 20).spawn(|| {
        let which: Vec<String> = std::env::args().skip(1).collect();
        let all = which.is_empty();
        let w = |s: &str| all || which.iter().any(|x| x == s);
        if w("silu") { dump("rs_silu", "silu_and_mul", vec![4096, 14336], vec![]); }
        if w("att128") { dump("rs_att_D128", "attention", vec![4, 32, 4096, 128, 0], vec![("BM", 128), ("BN", 64), ("OCC", 2), ("W", 0)]); }
        if w("att64") { dump("rs_att_D64", "attention", vec![4, 32, 4096, 64, 0], vec![("BM", 128), ("BN", 64), ("OCC", 2), ("W", 0)]); }
        if w("att128py") { dump("rs_att_D128_64x128", "attention", vec![4, 32, 4096, 128, 0], vec![("BM", 64), ("BN", 128), ("OCC", 2), ("W", 0)]); }
        if w("bmm") { dump("rs_bmm", "bmm", vec![16, 2048, 2048, 2048], vec![("BM", 128), ("BN", 256), ("BK", 64), ("W", 8)]); }
        if w("bmm32") { dump("rs_bmm_bk32", "bmm", vec![16, 2048, 2048, 2048], vec![("BM", 128), ("BN", 256), ("BK", 32), ("W", 8)]); }
    }).unwrap().join().unwrap();
}
