// cuTile-rs bench-shape cubins (defaults from config::resolve, launch spec bits), sm_90.
use tilerosetta_cutile_rs::args::DType;
use tilerosetta_cutile_rs::compile::{assemble_cubin, bytecode};
use tilerosetta_cutile_rs::{config, ops};
fn dump(name: &str, op: &'static str, dims: Vec<i32>, ov: Vec<(&'static str, i64)>) {
    let named: Vec<(&str, i64)> = ops::dim_names(op).iter().zip(&dims).map(|(k, v)| (*k, *v as i64)).collect();
    let cfg = config::resolve(op, DType::BF16, &named, &ov.iter().map(|(k, v)| (k.to_string(), *v)).collect::<Vec<_>>()).unwrap();
    for (i, spec) in ops::specs(op, DType::BF16, &cfg, &dims).unwrap().into_iter().enumerate() {
        let bc = bytecode(&spec, DType::BF16, "sm_90").unwrap();
        let c = assemble_cubin(&bc, "sm_90", &format!("{name}_{i}")).unwrap();
        std::fs::write(format!("/tmp/sass/rows2/rs/{name}_{i}.cubin"), c).unwrap();
        println!("{name}_{i} {} {cfg:?}", spec.function);
    }
}
fn main() {
    std::thread::Builder::new().stack_size(64 << 20).spawn(|| {
        for a in std::env::args().skip(1) {
            let (base, ovs) = a.split_once('+').unwrap_or((a.as_str(), ""));
            let ov: Vec<(&'static str, i64)> = ovs.split(',').filter(|s| !s.is_empty()).map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                let k: &'static str = match k { "BR" => "BR", "BN" => "BN", "OCC" => "OCC", "W" => "W", _ => panic!("key {k}") };
                (k, v.parse().unwrap())
            }).collect();
            let (op, m, n): (&'static str, i32, i32) = match base {
                "rms8192" => ("rms_norm", 4096, 8192), "rms4096" => ("rms_norm", 16384, 4096),
                "ln8192" => ("layer_norm", 4096, 8192), "ln4096" => ("layer_norm", 16384, 4096),
                "sm16384" => ("softmax", 4096, 16384), "sm4096" => ("softmax", 32768, 4096),
                _ => panic!("unknown {a}"),
            };
            dump(&format!("rs_{}", a.replace(|c: char| !c.is_ascii_alphanumeric(), "_")), op, vec![m, n], ov);
        }
    }).unwrap().join().unwrap();
}
