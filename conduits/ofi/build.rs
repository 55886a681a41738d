//! Compiles `src/shim.c`, which turns libfabric's static inline calls (`fi_tsend`, `fi_cq_read`,
//! ...) into functions Rust can call and gives Rust the values of the constants it uses, against
//! the libfabric that pkg-config finds (`libfabric-dev` on Debian; `ci/install-ofi.sh`).

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    let lib = match pkg_config::Config::new()
        .atleast_version("1.10")
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "amnet-ofi: libfabric not found through pkg-config (install libfabric-dev, or run \
             ci/install-ofi.sh): {e}"
        ),
    };
    let mut build = cc::Build::new();
    build.file("src/shim.c").warnings(true).extra_warnings(true);
    for inc in &lib.include_paths {
        build.include(inc);
    }
    build.compile("amnet_ofi_shim");
}
