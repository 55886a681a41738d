//! Compiles `src/consts.c`, which gives Rust the values of MPI constants whose names the
//! generated bindings spell differently from one MPI implementation to another (a macro in
//! Open MPI, an enumerator of a named enum in MPICH). The MPI library is found the way the
//! `mpi-sys` crate finds it (`build-probe-mpi`: `MPICC`, `mpicc`, or pkg-config).

fn main() {
    println!("cargo:rerun-if-changed=src/consts.c");
    let lib = match build_probe_mpi::probe() {
        Ok(lib) => lib,
        Err(errs) => {
            let reasons: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
            panic!(
                "amnet-mpi: no MPI library found (install Open MPI or MPICH, or set MPICC): {}",
                reasons.join("; ")
            );
        }
    };
    let mut build = cc::Build::new();
    build.file("src/consts.c");
    match lib.mpicc {
        Some(mpicc) => {
            build.compiler(mpicc);
        }
        None => {
            for inc in &lib.include_paths {
                build.include(inc);
            }
        }
    }
    build.compile("amnet_mpi_consts");
}
