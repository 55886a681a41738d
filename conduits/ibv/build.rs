//! With the cargo feature `ibv`, compiles `src/rdma/shim.c`, which turns libibverbs' static
//! inline data-path calls (`ibv_post_send`, `ibv_poll_cq`, ...) into functions Rust can call
//! and builds libibverbs' structs on the C side, and links libibverbs (rdma-core;
//! `libibverbs-dev` on Debian, `ci/install-ibv.sh`). Without the feature it does nothing: the
//! default build needs no system package and does not even build `cc` or `pkg-config`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Cargo compiles this script with the package's features, so this is the
    // `CARGO_FEATURE_IBV` test done at compile time, where the optional build dependencies
    // `cc` and `pkg-config` exist.
    #[cfg(feature = "ibv")]
    shim::build();
}

#[cfg(feature = "ibv")]
mod shim {
    use std::path::{Path, PathBuf};

    pub(super) fn build() {
        assert!(
            std::env::var_os("CARGO_FEATURE_IBV").is_some(),
            "amnet-ibv: build script compiled with feature `ibv` but run without it"
        );
        println!("cargo:rerun-if-changed=src/rdma/shim.c");
        let include_paths = match pkg_config::Config::new().probe("libibverbs") {
            Ok(lib) => lib.include_paths,
            Err(e) => {
                // Some installs of rdma-core have no pkg-config file: link the library by
                // name, as long as the compiler finds its header.
                let why = e.to_string().replace('\n', " ");
                println!(
                    "cargo:warning=amnet-ibv: pkg-config has no libibverbs ({why}); \
                     linking -libverbs"
                );
                println!("cargo:rustc-link-lib=ibverbs");
                Vec::new()
            }
        };
        check_header(&include_paths);
        let mut build = cc::Build::new();
        build
            .file("src/rdma/shim.c")
            .warnings(true)
            .extra_warnings(true);
        for inc in &include_paths {
            build.include(inc);
        }
        build.compile("amnet_ibv_shim");
    }

    /// Panics with what to install when `<infiniband/verbs.h>` does not compile.
    fn check_header(include_paths: &[PathBuf]) {
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let probe = out.join("amnet_ibv_probe.c");
        std::fs::write(
            &probe,
            "#include <infiniband/verbs.h>\nint amnet_ibv_probe(void) { return IBV_WR_SEND; }\n",
        )
        .expect("writing the header probe into OUT_DIR");
        let mut build = cc::Build::new();
        build.file(Path::new(&probe)).cargo_metadata(false);
        for inc in include_paths {
            build.include(inc);
        }
        if let Err(e) = build.try_compile("amnet_ibv_probe") {
            panic!(
                "amnet-ibv: the cargo feature `ibv` needs libibverbs' headers \
                 (<infiniband/verbs.h>), which the C compiler did not find; install \
                 libibverbs-dev (rdma-core), or run ci/install-ibv.sh: {e}"
            );
        }
    }
}
