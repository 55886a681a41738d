//! The `AMNET_IBV_PORTS` list, in GASNet's `GASNET_IBV_PORTS` syntax: HCAs separated by `+`,
//! each optionally followed by `:` and its ports separated by `,`.
//!
//! ```text
//! mlx5_0              any active port of mlx5_0
//! mlx5_0:1            port 1 of mlx5_0
//! mlx5_0:2,1+mlx4_0   port 2, then port 1, of mlx5_0; then any port of mlx4_0
//! ```
//!
//! The device takes the first HCA and port of the list, in order, that exists and is active.

use amnet_core::{Error, Result};

/// One HCA of the list, with the ports named for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HcaPorts {
    /// The device's name, as `ibv_devices` lists it.
    pub(crate) hca: String,
    /// The ports to try, in order; empty: every port of the HCA.
    pub(crate) ports: Vec<u8>,
}

/// The HCAs and ports `spec` names; empty for a blank `spec` (any port of any HCA).
pub(crate) fn parse(spec: &str) -> Result<Vec<HcaPorts>> {
    let bad = |why: String| {
        Error::Config(format!(
            "AMNET_IBV_PORTS={spec:?}: {why}; the form is HCA[:PORT[,PORT...]][+HCA...], for \
             example mlx5_0:1+mlx5_1 (ibv_devinfo lists the HCAs and their ports)"
        ))
    };
    let spec_trimmed = spec.trim();
    if spec_trimmed.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (n, entry) in spec_trimmed.split('+').enumerate() {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err(bad(format!("entry {} is empty", n + 1)));
        }
        let (hca, list) = match entry.split_once(':') {
            Some((h, l)) => (h.trim(), Some(l)),
            None => (entry, None),
        };
        if hca.is_empty() {
            return Err(bad(format!("entry {:?} names no HCA", entry)));
        }
        if hca.chars().any(|c| c.is_whitespace() || c == ',') {
            return Err(bad(format!("{hca:?} is not an HCA name")));
        }
        let mut ports = Vec::new();
        if let Some(list) = list {
            for p in list.split(',') {
                let p = p.trim();
                match p.parse::<u8>() {
                    Ok(v) if v > 0 => ports.push(v),
                    _ => {
                        return Err(bad(format!(
                            "{p:?} (for {hca}) is not a port number (1 to 255)"
                        )))
                    }
                }
            }
        }
        out.push(HcaPorts {
            hca: hca.to_string(),
            ports,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(hca: &str, ports: &[u8]) -> HcaPorts {
        HcaPorts {
            hca: hca.to_string(),
            ports: ports.to_vec(),
        }
    }

    #[test]
    fn parses_gasnet_port_lists() {
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(parse("  ").unwrap(), vec![]);
        assert_eq!(parse("mlx5_0").unwrap(), vec![hp("mlx5_0", &[])]);
        assert_eq!(parse("mlx5_0:1").unwrap(), vec![hp("mlx5_0", &[1])]);
        assert_eq!(
            parse("mlx5_0:1+mlx4_0").unwrap(),
            vec![hp("mlx5_0", &[1]), hp("mlx4_0", &[])]
        );
        assert_eq!(
            parse(" mlx5_0 : 2, 1 + mlx5_1:1 ").unwrap(),
            vec![hp("mlx5_0", &[2, 1]), hp("mlx5_1", &[1])]
        );
        assert_eq!(parse("rxe0:255").unwrap(), vec![hp("rxe0", &[255])]);
    }

    #[test]
    fn rejects_malformed_lists_with_the_expected_form() {
        for (spec, says) in [
            ("mlx5_0+", "entry 2 is empty"),
            ("+mlx5_0", "entry 1 is empty"),
            (":1", "names no HCA"),
            ("mlx5_0:", "is not a port number"),
            ("mlx5_0:0", "is not a port number"),
            ("mlx5_0:256", "is not a port number"),
            ("mlx5_0:1,,2", "is not a port number"),
            ("mlx5_0:x", "is not a port number"),
            ("mlx5 0", "is not an HCA name"),
            ("mlx5_0,mlx5_1", "is not an HCA name"),
        ] {
            let e = parse(spec).unwrap_err().to_string();
            assert!(e.contains(says), "{spec:?}: {e}");
            assert!(e.contains("HCA[:PORT[,PORT...]][+HCA...]"), "{spec:?}: {e}");
        }
    }
}
