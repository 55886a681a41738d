//! Provider selection, as Open MPI's OFI MTL does it: ask `fi_getinfo` for reliable-datagram
//! endpoints with tagged messaging (and RMA where offered), drop the answers that the include
//! and exclude lists (`AMNET_OFI_PROVIDER_INCLUDE` / `_EXCLUDE`) rule out, and take the first
//! that remains (libfabric lists the most performant first). Then ask that provider again
//! for the capabilities the full tag layout needs (remote CQ data, directed receive), so that
//! `auto` can use them where they exist without letting them decide which provider is chosen.

use std::ffi::CString;

use amnet_core::{Error, Result};

use crate::ffi::{self, Desc, FiInfo};
use crate::raw::Choice;

fn err(msg: impl Into<String>) -> Error {
    Error::conduit("ofi", msg.into())
}

/// A comma list of provider names (`AMNET_OFI_PROVIDER_INCLUDE`/`_EXCLUDE`), trimmed, empty
/// entries dropped.
pub(crate) fn parse_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// True when `prov` ("tcp;ofi_rxm", "shm") is named by `list`: by its whole name or by any of
/// the names its layers are joined from.
pub(crate) fn named_by(prov: &str, list: &[String]) -> bool {
    list.iter()
        .any(|n| n == prov || prov.split(';').any(|part| part == n))
}

/// The `fi_getinfo` list of one query, freed on drop.
struct InfoList(*mut FiInfo);

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the list came from amnet_ofi_getinfo and is freed once.
            unsafe { ffi::amnet_ofi_freeinfo(self.0) };
        }
    }
}

impl InfoList {
    fn query(caps: u64, prov: Option<&str>, node: Option<&str>) -> Result<InfoList> {
        let prov_c = prov
            .map(CString::new)
            .transpose()
            .map_err(|_| err("a provider name holds a NUL byte"))?;
        let node_c = node
            .map(CString::new)
            .transpose()
            .map_err(|_| err("the source address holds a NUL byte"))?;
        let p = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        let mut out: *mut FiInfo = std::ptr::null_mut();
        // SAFETY: the strings are NUL-terminated or null, and outlive the call; `out` is
        // written by the call.
        let rc = unsafe {
            ffi::amnet_ofi_getinfo(caps, p(&prov_c), p(&node_c), std::ptr::null(), &mut out)
        };
        let list = InfoList(out);
        if rc == -ffi::FI_ENODATA() {
            return Ok(InfoList(std::ptr::null_mut()));
        }
        if rc != 0 {
            return Err(err(format!(
                "fi_getinfo: {} ({rc})",
                ffi::strerror(i64::from(rc))
            )));
        }
        Ok(list)
    }

    /// Every answer, in libfabric's order, with its description.
    fn entries(&self) -> Vec<(*mut FiInfo, Desc)> {
        let mut v = Vec::new();
        let mut p = self.0;
        while !p.is_null() {
            let mut d = Desc::zeroed();
            // SAFETY: `p` is an element of the live list; `d` is written by the call.
            unsafe { ffi::amnet_ofi_describe(p, &mut d) };
            v.push((p, d));
            // SAFETY: as above.
            p = unsafe { ffi::amnet_ofi_info_next(p) };
        }
        v
    }
}

/// The chosen provider: its `fi_info` (owned by the list it came from) and what it offers.
pub(crate) struct Selected {
    _list: InfoList,
    info: *mut FiInfo,
    /// The chosen answer's attributes.
    pub(crate) desc: Desc,
    /// It offers FI_RMA (with remote reads and writes) to this endpoint.
    pub(crate) rma: bool,
    /// It offers FI_REMOTE_CQ_DATA and FI_DIRECTED_RECV (the full tag layout).
    pub(crate) full_tags: bool,
    /// It offers RMA and 8 bytes of remote CQ data: writes that the target sees complete.
    pub(crate) rma_data: bool,
    /// Every provider name the query offered before the lists were applied, deduplicated,
    /// in libfabric's order (for messages).
    pub(crate) offered: Vec<String>,
}

// SAFETY: the fi_info list is plain memory owned by `_list`, read only after selection.
unsafe impl Send for Selected {}
// SAFETY: as above.
unsafe impl Sync for Selected {}

impl Selected {
    /// The `fi_info` to open the endpoint with (valid as long as `self`).
    pub(crate) fn info(&self) -> *mut FiInfo {
        self.info
    }
}

fn rma_caps() -> u64 {
    ffi::FI_RMA()
        | ffi::FI_READ()
        | ffi::FI_WRITE()
        | ffi::FI_REMOTE_READ()
        | ffi::FI_REMOTE_WRITE()
}

/// Pick the provider `want` describes: tagged messaging is required, RMA taken where the
/// first acceptable provider offers it.
pub(crate) fn select(want: &Choice) -> Result<Selected> {
    let base = ffi::FI_TAGGED();
    let list = InfoList::query(base, None, None)?;
    let entries = list.entries();
    let mut offered: Vec<String> = Vec::new();
    for (_, d) in &entries {
        let n = d.prov_name();
        if !offered.contains(&n) {
            offered.push(n);
        }
    }
    let ok = |d: &Desc| {
        let n = d.prov_name();
        (want.include.is_empty() || named_by(&n, &want.include)) && !named_by(&n, &want.exclude)
    };
    let Some((_, first)) = entries.iter().find(|(_, d)| ok(d)) else {
        return Err(err(format!(
            "no libfabric provider offers tagged messages on reliable-datagram endpoints{}{}; \
             offered: [{}]",
            if want.include.is_empty() {
                String::new()
            } else {
                format!(
                    " among AMNET_OFI_PROVIDER_INCLUDE={}",
                    want.include.join(",")
                )
            },
            if want.exclude.is_empty() {
                String::new()
            } else {
                format!(
                    " outside AMNET_OFI_PROVIDER_EXCLUDE={}",
                    want.exclude.join(",")
                )
            },
            offered.join(", ")
        )));
    };
    let prov = first.prov_name();
    let domain = first.domain_name();
    // The source address applies to providers with socket addresses only (shm's are names).
    let node = want.node.as_deref().filter(|_| first.sockaddr != 0);
    // Ask the chosen provider again, at the source address where one applies, richest first:
    // RMA and the full tag layout's capabilities, RMA alone, the full layout alone, tagged
    // alone. The first query that answers for the same provider (and, without a source
    // address, the same domain) wins.
    let full = ffi::FI_REMOTE_CQ_DATA() | ffi::FI_DIRECTED_RECV();
    for (caps, rma, full_tags) in [
        (base | rma_caps() | full, true, true),
        (base | rma_caps(), true, false),
        (base | full, false, true),
        (base, false, false),
    ] {
        let l = InfoList::query(caps, Some(&prov), node)?;
        let found = l
            .entries()
            .into_iter()
            .find(|(_, d)| d.prov_name() == prov && (node.is_some() || d.domain_name() == domain));
        if let Some((info, desc)) = found {
            let full_tags = full_tags && desc.cq_data_size >= 4;
            // Remote CQ data comes with a nonzero `cq_data_size`; libfabric 1.17's providers
            // offer it without naming FI_REMOTE_CQ_DATA among their capabilities.
            let rma_data = rma && desc.cq_data_size >= 8;
            return Ok(Selected {
                _list: l,
                info,
                desc,
                rma,
                full_tags,
                rma_data,
                offered,
            });
        }
    }
    Err(err(format!(
        "provider {prov} (domain {domain}) did not answer a second query for the same \
         endpoint{}",
        node.map(|n| format!(" at {n}")).unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_match_whole_and_layered_names() {
        let l = parse_list(" tcp, ,shm ");
        assert_eq!(l, ["tcp", "shm"]);
        assert!(named_by("tcp;ofi_rxm", &l));
        assert!(named_by("shm", &l));
        assert!(!named_by("udp;ofi_rxd", &l));
        assert!(named_by("udp;ofi_rxd", &parse_list("udp;ofi_rxd")));
        assert!(named_by("udp;ofi_rxd", &parse_list("ofi_rxd")));
        assert!(!named_by("sockets", &parse_list("sock")));
    }

    #[test]
    fn selects_each_installed_provider_on_loopback() {
        for (inc, prefix) in [("tcp", "tcp"), ("udp", "udp"), ("shm", "shm")] {
            let want = Choice {
                include: parse_list(inc),
                // shm's addresses are names: the source address does not apply to it.
                node: Some("127.0.0.1".to_owned()),
                ..Choice::default()
            };
            let s = select(&want).unwrap_or_else(|e| panic!("{inc}: {e}"));
            assert!(
                s.desc.prov_name().starts_with(prefix),
                "{}",
                s.desc.prov_name()
            );
            assert!(s.desc.caps & ffi::FI_TAGGED() != 0);
            assert!(!s.info().is_null());
        }
    }

    #[test]
    fn exclusions_and_unknown_names_are_clear_errors() {
        let e = select(&Choice {
            include: parse_list("no_such_provider"),
            ..Choice::default()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            e.contains("AMNET_OFI_PROVIDER_INCLUDE=no_such_provider") && e.contains("offered"),
            "{e}"
        );
        let s = select(&Choice {
            exclude: parse_list("tcp,net,ofi_rxm"),
            node: Some("127.0.0.1".into()),
            ..Choice::default()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            !s.desc.prov_name().contains("tcp"),
            "{}",
            s.desc.prov_name()
        );
    }
}
