//! The layouts of job, source rank and message class in libfabric's 64-bit tag.
//!
//! An active message needs more than 64 bits of matching information (job, source rank,
//! message class, and two protocol bits for the conduit), so, like Open MPI's OFI MTL, the
//! conduit offers tag modes that trade field widths against each other, chosen with
//! `AMNET_OFI_TAG_MODE`:
//!
//! ```text
//!  bit 63                                                                       bit 0
//!  ofi_tag_1     | proto 2 | job 12          | source rank 18 | class 32            |
//!  ofi_tag_2     | proto 2 | job 24          | source rank 18 | class 20            |
//!  ofi_tag_full  | proto 2 | 0 0 | job 28                     | class 32            |
//!                  (source rank in the completion's remote CQ data, 32 bits)
//! ```
//!
//! `auto` takes `ofi_tag_full` where the provider offers FI_REMOTE_CQ_DATA (4 bytes or more)
//! and FI_DIRECTED_RECV, `ofi_tag_1` elsewhere.
//!
//! A provider that keeps high tag bits for itself says so with leading zero bits in the
//! endpoint's `mem_tag_format` (0: nothing reported, nothing reserved). The layout then moves
//! down below those bits: the protocol bits stay the top two usable bits and the job field
//! loses one bit per reserved bit; source rank and class keep their widths and places:
//!
//! ```text
//!  ofi_tag_1, 4 bits reserved
//!                | 0 0 0 0 | proto 2 | job 8   | source rank 18 | class 32            |
//! ```
//!
//! Everything here is pure arithmetic on the layout: [`Layout::choose`] checks the job's
//! limits once, so that encoding never has to wrap or truncate a value.

/// Width of the protocol field, the top two usable bits of every layout.
const PROTO_BITS: u32 = 2;

/// Width of a libfabric tag.
const TAG_BITS: u32 = 64;

/// Width of the remote CQ data the full layout sends the source rank in, in bytes.
const MIN_CQ_DATA_BYTES: usize = 4;

/// AMNET_OFI_TAG_MODE values.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TagMode {
    /// `auto`: `ofi_tag_full` where the provider allows it, `ofi_tag_1` elsewhere.
    Auto,
    /// `ofi_tag_1`: job 12 bits, source rank 18 bits, class 32 bits.
    Tag1,
    /// `ofi_tag_2`: job 24 bits, source rank 18 bits, class 20 bits.
    Tag2,
    /// `ofi_tag_full`: job 28 bits, class 32 bits, source rank in remote CQ data.
    Full,
}

impl TagMode {
    /// Parse the environment value ("auto", "ofi_tag_1", "ofi_tag_2", "ofi_tag_full"; exact,
    /// lowercase). Err: a message naming AMNET_OFI_TAG_MODE, the bad value and the four
    /// accepted ones.
    pub fn parse(s: &str) -> Result<TagMode, String> {
        match s {
            "auto" => Ok(TagMode::Auto),
            "ofi_tag_1" => Ok(TagMode::Tag1),
            "ofi_tag_2" => Ok(TagMode::Tag2),
            "ofi_tag_full" => Ok(TagMode::Full),
            _ => Err(format!(
                "AMNET_OFI_TAG_MODE={s:?} is not a tag mode; use one of auto, ofi_tag_1, \
                 ofi_tag_2, ofi_tag_full (exact, lowercase)"
            )),
        }
    }

    /// The spelling above.
    pub fn name(self) -> &'static str {
        match self {
            TagMode::Auto => "auto",
            TagMode::Tag1 => "ofi_tag_1",
            TagMode::Tag2 => "ofi_tag_2",
            TagMode::Full => "ofi_tag_full",
        }
    }

    /// The field widths of a fixed mode before any bits are reserved: (job, source, class,
    /// unused bits between job and protocol). None for Auto, which is no layout.
    fn base_widths(self) -> Option<(u32, u32, u32, u32)> {
        match self {
            TagMode::Auto => None,
            TagMode::Tag1 => Some((12, 18, 32, 0)),
            TagMode::Tag2 => Some((24, 18, 20, 0)),
            TagMode::Full => Some((28, 0, 32, 2)),
        }
    }
}

/// What the selected provider offers, as far as tags go.
#[derive(Copy, Clone, Debug)]
pub struct TagCaps {
    /// The provider offers FI_REMOTE_CQ_DATA.
    pub remote_cq_data: bool,
    /// Bytes of remote CQ data the domain carries (`fi_domain_attr::cq_data_size`).
    pub cq_data_size: usize,
    /// The provider offers FI_DIRECTED_RECV.
    pub directed_recv: bool,
    /// The endpoint's `mem_tag_format`: leading zero bits are reserved by the provider; 0
    /// means no restriction reported.
    pub mem_tag_format: u64,
}

impl TagCaps {
    /// What keeps the full layout off this provider, or None when it can be used.
    fn missing_for_full(&self) -> Option<String> {
        let mut missing = Vec::new();
        if !self.remote_cq_data {
            missing.push("FI_REMOTE_CQ_DATA".to_string());
        } else if self.cq_data_size < MIN_CQ_DATA_BYTES {
            missing.push(format!(
                "FI_REMOTE_CQ_DATA of at least {MIN_CQ_DATA_BYTES} bytes (cq_data_size is {})",
                self.cq_data_size
            ));
        }
        if !self.directed_recv {
            missing.push("FI_DIRECTED_RECV".to_string());
        }
        if missing.is_empty() {
            None
        } else {
            Some(missing.join(" and "))
        }
    }

    /// How many high tag bits the provider reserves: the leading zeros of `mem_tag_format`,
    /// none when it is 0 (nothing reported).
    fn reserved_bits(&self) -> u32 {
        if self.mem_tag_format == 0 {
            0
        } else {
            self.mem_tag_format.leading_zeros()
        }
    }
}

/// One of the three fields whose limits `choose` checks, for error messages.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Field {
    /// The source rank.
    Rank,
    /// The job id.
    Job,
    /// The message class.
    Class,
}

impl Field {
    /// The plural noun an error message uses for the field's values.
    fn noun(self) -> &'static str {
        match self {
            Field::Rank => "source ranks",
            Field::Job => "job ids",
            Field::Class => "message classes",
        }
    }
}

/// A fixed tag layout (never Auto).
///
/// The class field starts at bit 0, the source field right above it, then the job field,
/// any unused bits, the two protocol bits, and the bits the provider reserves.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The resolved mode: Tag1, Tag2 or Full.
    mode: TagMode,
    /// High bits reserved by the provider (leading zeros of `mem_tag_format`).
    reserved: u32,
    /// Lowest bit of the protocol field.
    proto_shift: u32,
    /// Lowest bit of the job field.
    job_shift: u32,
    /// Width of the job field (at least 1).
    job_bits: u32,
    /// Lowest bit of the source field.
    src_shift: u32,
    /// Width of the source field (0 for Full).
    src_bits: u32,
    /// Width of the class field, which starts at bit 0.
    class_bits: u32,
}

/// A mask of the low `bits` bits, for any width 0..=64 (all ones above 64).
fn low_mask(bits: u32) -> u64 {
    match 1u64.checked_shl(bits) {
        Some(top) => top - 1,
        None => u64::MAX,
    }
}

/// The mask of a `bits` wide field starting at bit `shift` (empty when `shift` is 64 or more).
fn field_mask(bits: u32, shift: u32) -> u64 {
    low_mask(bits).checked_shl(shift).unwrap_or(0)
}

/// `value` moved up to bit `shift` (0 when `shift` is 64 or more).
fn put(value: u64, shift: u32) -> u64 {
    value.checked_shl(shift).unwrap_or(0)
}

/// The `bits` wide field at bit `shift` of `tag`.
fn get(tag: u64, bits: u32, shift: u32) -> u64 {
    tag.checked_shr(shift).unwrap_or(0) & low_mask(bits)
}

impl Layout {
    /// The layout of a fixed `mode` with `reserved` high bits taken by the provider, or None
    /// when `mode` is Auto or the job field would be left with no bit.
    fn build(mode: TagMode, reserved: u32) -> Option<Layout> {
        let (base_job, src_bits, class_bits, unused) = mode.base_widths()?;
        let job_bits = base_job.checked_sub(reserved).filter(|&b| b >= 1)?;
        let src_shift = class_bits;
        let job_shift = src_shift + src_bits;
        let proto_shift = job_shift + job_bits + unused;
        debug_assert_eq!(proto_shift + PROTO_BITS + reserved, TAG_BITS);
        Some(Layout {
            mode,
            reserved,
            proto_shift,
            job_shift,
            job_bits,
            src_shift,
            src_bits,
            class_bits,
        })
    }

    /// Resolve `mode` against `caps` and check the job's limits: `nranks` ranks (the largest
    /// rank nranks-1 must fit the source field unless the mode is full, where it must fit 32
    /// bits), and job ids up to `max_job` (must fit the job field after reserved bits), classes
    /// up to `max_class` (must fit the class field). Every violation is an Err(String) that
    /// names the mode, the limit and the value. Forcing Full on a provider without
    /// FI_REMOTE_CQ_DATA (or cq_data_size < 4) or without FI_DIRECTED_RECV is an Err saying
    /// which capability is missing and that auto or ofi_tag_1 work there.
    pub fn choose(
        mode: TagMode,
        caps: &TagCaps,
        nranks: u32,
        max_job: u64,
        max_class: u32,
    ) -> Result<Layout, String> {
        let missing = caps.missing_for_full();
        let (resolved, label) = match (mode, &missing) {
            (TagMode::Full, Some(m)) => {
                return Err(format!(
                    "AMNET_OFI_TAG_MODE=ofi_tag_full needs {m}, which the provider does not \
                     offer; AMNET_OFI_TAG_MODE=auto or ofi_tag_1 work there"
                ))
            }
            (TagMode::Auto, None) => (
                TagMode::Full,
                "AMNET_OFI_TAG_MODE=auto (ofi_tag_full on this provider)".to_string(),
            ),
            (TagMode::Auto, Some(m)) => (
                TagMode::Tag1,
                format!("AMNET_OFI_TAG_MODE=auto (ofi_tag_1 here: the provider lacks {m})"),
            ),
            (fixed, _) => (fixed, format!("AMNET_OFI_TAG_MODE={}", fixed.name())),
        };
        let reserved = caps.reserved_bits();
        let Some(layout) = Layout::build(resolved, reserved) else {
            let base_job = resolved.base_widths().map_or(0, |w| w.0);
            return Err(format!(
                "{label} leaves no bit for the job id: the provider's mem_tag_format {:#018x} \
                 reserves {reserved} high tag bits and the layout's job field has {base_job} \
                 ({})",
                caps.mem_tag_format,
                alternatives(resolved, caps, Field::Job, 1)
            ));
        };

        if let Some(largest) = nranks.checked_sub(1).filter(|&r| r > layout.max_rank()) {
            return Err(format!(
                "{label} carries source ranks up to {}; this job has {nranks} ranks ({})",
                layout.max_rank(),
                alternatives(resolved, caps, Field::Rank, u64::from(largest))
            ));
        }
        if max_job > layout.max_job() {
            return Err(format!(
                "{label} carries job ids up to {}{}; this job needs ids up to {max_job} ({})",
                layout.max_job(),
                layout.reserved_note(caps.mem_tag_format),
                alternatives(resolved, caps, Field::Job, max_job)
            ));
        }
        if max_class > layout.max_class() {
            return Err(format!(
                "{label} carries message classes up to {}; this job needs classes up to \
                 {max_class} ({})",
                layout.max_class(),
                alternatives(resolved, caps, Field::Class, u64::from(max_class))
            ));
        }
        Ok(layout)
    }

    /// The resolved mode (Tag1, Tag2 or Full).
    pub fn mode(&self) -> TagMode {
        self.mode
    }

    /// True when the source rank travels in remote CQ data (Full).
    pub fn src_in_cq_data(&self) -> bool {
        self.mode == TagMode::Full
    }

    /// Field widths for AMNET_VERBOSE: (protocol, job, source (0 for Full), class) bits, and
    /// how many high bits are reserved by the provider.
    pub fn widths(&self) -> (u32, u32, u32, u32, u32) {
        (
            PROTO_BITS,
            self.job_bits,
            self.src_bits,
            self.class_bits,
            self.reserved,
        )
    }

    /// The largest job id this layout carries.
    pub fn max_job(&self) -> u64 {
        low_mask(self.job_bits)
    }

    /// The largest source rank this layout carries (u32::MAX for Full).
    pub fn max_rank(&self) -> u32 {
        if self.src_in_cq_data() {
            u32::MAX
        } else {
            u32::try_from(low_mask(self.src_bits)).unwrap_or(u32::MAX)
        }
    }

    /// The largest message class this layout carries.
    pub fn max_class(&self) -> u32 {
        u32::try_from(low_mask(self.class_bits)).unwrap_or(u32::MAX)
    }

    /// The largest value of `field` this layout carries.
    fn field_max(&self, field: Field) -> u64 {
        match field {
            Field::Rank => u64::from(self.max_rank()),
            Field::Job => self.max_job(),
            Field::Class => u64::from(self.max_class()),
        }
    }

    /// For an error about the job field: where reserved bits shrank it, and by how much.
    fn reserved_note(&self, mem_tag_format: u64) -> String {
        if self.reserved == 0 {
            String::new()
        } else {
            format!(
                " ({} bits: the provider's mem_tag_format {mem_tag_format:#018x} reserves {} \
                 high tag bits)",
                self.job_bits, self.reserved
            )
        }
    }

    /// Every bit a tag of this layout may have set.
    fn used_bits(&self) -> u64 {
        field_mask(PROTO_BITS, self.proto_shift)
            | field_mask(self.job_bits, self.job_shift)
            | field_mask(self.src_bits, self.src_shift)
            | field_mask(self.class_bits, 0)
    }

    /// The tag bits of the protocol field.
    fn proto_bits(&self) -> u64 {
        field_mask(PROTO_BITS, self.proto_shift)
    }

    /// The tag bits of the source field (none for Full).
    fn src_field(&self) -> u64 {
        field_mask(self.src_bits, self.src_shift)
    }

    /// Check, in debug builds, that the values fit the fields; `choose` guarantees it.
    fn debug_check(&self, proto: u8, job: u64, src: u32, class: u32) {
        debug_assert!(proto <= 3, "protocol value {proto} does not fit 2 bits");
        debug_assert!(
            job <= self.max_job(),
            "job id {job} exceeds {} of {}",
            self.max_job(),
            self.mode.name()
        );
        debug_assert!(
            src <= self.max_rank(),
            "source rank {src} exceeds {} of {}",
            self.max_rank(),
            self.mode.name()
        );
        debug_assert!(
            class <= self.max_class(),
            "message class {class} exceeds {} of {}",
            self.max_class(),
            self.mode.name()
        );
    }

    /// The tag with every field set, the source left out for Full.
    fn tag_of(&self, proto: u8, job: u64, src: u32, class: u32) -> u64 {
        let src_part = if self.src_in_cq_data() {
            0
        } else {
            put(u64::from(src), self.src_shift)
        };
        put(u64::from(proto), self.proto_shift)
            | put(job, self.job_shift)
            | src_part
            | u64::from(class)
    }

    /// The tag of a message, and the CQ data to send with it (Some(src) for Full, None
    /// otherwise). Callers pass values within the limits checked by `choose` (debug-asserted
    /// here, never masked).
    pub fn encode(&self, proto: u8, job: u64, src: u32, class: u32) -> (u64, Option<u64>) {
        self.debug_check(proto, job, src, class);
        let data = if self.src_in_cq_data() {
            Some(u64::from(src))
        } else {
            None
        };
        (self.tag_of(proto, job, src, class), data)
    }

    /// Decode a received completion: (proto, job, src, class). `cq_data` is the completion's
    /// data (only read for Full). Bits outside the layout (reserved or unused) being non-zero is
    /// Err naming the tag in hex, as is CQ data that does not hold a 32-bit rank.
    pub fn decode(&self, tag: u64, cq_data: u64) -> Result<(u8, u64, u32, u32), String> {
        let stray = tag & !self.used_bits();
        if stray != 0 {
            return Err(format!(
                "received tag {tag:#018x} has bits {stray:#018x} set outside the {} layout \
                 ({} reserved high bits); the sender uses another AMNET_OFI_TAG_MODE or the \
                 tag is corrupt",
                self.mode.name(),
                self.reserved
            ));
        }
        let narrow = |value: u64, what: &str| {
            u32::try_from(value).map_err(|_| {
                format!("{what} {value:#x} of received tag {tag:#018x} does not fit 32 bits")
            })
        };
        let proto = u8::try_from(get(tag, PROTO_BITS, self.proto_shift))
            .map_err(|_| format!("protocol field of received tag {tag:#018x} exceeds 8 bits"))?;
        let job = get(tag, self.job_bits, self.job_shift);
        let src = if self.src_in_cq_data() {
            narrow(cq_data, "remote CQ data (source rank)")?
        } else {
            narrow(get(tag, self.src_bits, self.src_shift), "source field")?
        };
        let class = narrow(get(tag, self.class_bits, 0), "class field")?;
        Ok((proto, job, src, class))
    }

    /// Tag and ignore mask for posting a receive that matches one job and one class from any
    /// source and any protocol value (libfabric matches when (tag ^ posted) & !ignore == 0).
    /// Reserved and unused bits are not ignored: senders always leave them zero.
    pub fn recv_any(&self, job: u64, class: u32) -> (u64, u64) {
        self.debug_check(0, job, 0, class);
        (
            self.tag_of(0, job, 0, class),
            self.proto_bits() | self.src_field(),
        )
    }

    /// Tag and ignore mask matching exactly (proto, job, src, class); for Full the source is
    /// not in the tag (the caller uses directed receive), so no tag bit stands for it.
    pub fn recv_exact(&self, proto: u8, job: u64, src: u32, class: u32) -> (u64, u64) {
        self.debug_check(proto, job, src, class);
        (self.tag_of(proto, job, src, class), 0)
    }
}

/// For an error about `field` needing `value`: which other modes would carry it on this
/// provider (with its reserved bits), and which would only with capabilities it lacks.
fn alternatives(resolved: TagMode, caps: &TagCaps, field: Field, value: u64) -> String {
    let missing = caps.missing_for_full();
    let mut fits = Vec::new();
    let mut would = Vec::new();
    for mode in [TagMode::Tag1, TagMode::Tag2, TagMode::Full] {
        if mode == resolved {
            continue;
        }
        let Some(other) = Layout::build(mode, caps.reserved_bits()) else {
            continue;
        };
        let max = other.field_max(field);
        if max < value {
            continue;
        }
        let text = format!("{} carries {} up to {max}", mode.name(), field.noun());
        match (mode, &missing) {
            (TagMode::Full, Some(m)) => would.push(format!("{text} but needs {m}")),
            _ => fits.push(text),
        }
    }
    if fits.is_empty() && would.is_empty() {
        return "no tag mode carries that many on this provider".to_string();
    }
    fits.extend(would);
    fits.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A provider with everything the full layout needs and no reserved bits.
    fn rich() -> TagCaps {
        TagCaps {
            remote_cq_data: true,
            cq_data_size: 8,
            directed_recv: true,
            mem_tag_format: 0,
        }
    }

    /// A provider with neither remote CQ data nor directed receive.
    fn poor() -> TagCaps {
        TagCaps {
            remote_cq_data: false,
            cq_data_size: 0,
            directed_recv: false,
            mem_tag_format: 0,
        }
    }

    /// The layout of `mode` on `caps` with small limits.
    fn layout(mode: TagMode, caps: &TagCaps) -> Layout {
        match Layout::choose(mode, caps, 1, 0, 0) {
            Ok(l) => l,
            Err(e) => panic!("{} on {caps:?}: {e}", mode.name()),
        }
    }

    /// The fixed modes with the capabilities each needs.
    fn fixed() -> [(TagMode, TagCaps); 3] {
        [
            (TagMode::Tag1, poor()),
            (TagMode::Tag2, poor()),
            (TagMode::Full, rich()),
        ]
    }

    /// libfabric's matching rule.
    fn matches(tag: u64, posted: u64, ignore: u64) -> bool {
        (tag ^ posted) & !ignore == 0
    }

    /// The high `reserved` bits of a tag.
    fn reserved_mask(reserved: u32) -> u64 {
        !low_mask(TAG_BITS - reserved)
    }

    /// Round trip `l` with the field values, checking reserved bits stay clear.
    fn round_trip(l: &Layout, proto: u8, job: u64, src: u32, class: u32) {
        let (tag, data) = l.encode(proto, job, src, class);
        assert_eq!(tag & reserved_mask(l.reserved), 0, "{l:?} tag {tag:#x}");
        assert_eq!(data.is_some(), l.src_in_cq_data());
        let got = l.decode(tag, data.unwrap_or(0));
        assert_eq!(got, Ok((proto, job, src, class)), "{l:?} tag {tag:#x}");
    }

    #[test]
    fn parse_names() {
        for m in [TagMode::Auto, TagMode::Tag1, TagMode::Tag2, TagMode::Full] {
            assert_eq!(TagMode::parse(m.name()), Ok(m));
        }
        assert_eq!(TagMode::Tag1.name(), "ofi_tag_1");
        for bad in ["OFI_TAG_1", "", "full", " auto"] {
            let e = TagMode::parse(bad).unwrap_err();
            assert!(e.contains("AMNET_OFI_TAG_MODE"), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
            for name in ["auto", "ofi_tag_1", "ofi_tag_2", "ofi_tag_full"] {
                assert!(e.contains(name), "{e}");
            }
        }
    }

    #[test]
    fn widths_of_each_mode() {
        assert_eq!(layout(TagMode::Tag1, &poor()).widths(), (2, 12, 18, 32, 0));
        assert_eq!(layout(TagMode::Tag2, &poor()).widths(), (2, 24, 18, 20, 0));
        assert_eq!(layout(TagMode::Full, &rich()).widths(), (2, 28, 0, 32, 0));
        let t1 = layout(TagMode::Tag1, &poor());
        assert_eq!(
            (t1.max_job(), t1.max_rank(), t1.max_class()),
            (4095, 262_143, u32::MAX)
        );
        let t2 = layout(TagMode::Tag2, &poor());
        assert_eq!(
            (t2.max_job(), t2.max_rank(), t2.max_class()),
            (16_777_215, 262_143, 1_048_575)
        );
        let f = layout(TagMode::Full, &rich());
        assert_eq!(
            (f.max_job(), f.max_rank(), f.max_class()),
            (268_435_455, u32::MAX, u32::MAX)
        );
        assert!(f.src_in_cq_data() && !t1.src_in_cq_data() && !t2.src_in_cq_data());
    }

    #[test]
    fn round_trips_every_mode() {
        for (mode, caps) in fixed() {
            let l = layout(mode, &caps);
            let (mj, mr, mc) = (l.max_job(), l.max_rank(), l.max_class());
            round_trip(&l, 0, 0, 0, 0);
            round_trip(&l, 3, mj, mr, mc);
            round_trip(&l, 1, 7, 5, 9);
            round_trip(&l, 2, mj / 3, mr / 7, mc / 5);
            round_trip(&l, 3, 1, mr, 0);
            round_trip(&l, 0, mj, 0, mc);
        }
    }

    #[test]
    fn fields_do_not_overlap() {
        for (mode, caps) in fixed() {
            let l = layout(mode, &caps);
            let (mj, mr, mc) = (l.max_job(), l.max_rank(), l.max_class());
            let one = |p, j, s, c| l.decode(l.encode(p, j, s, c).0, 0);
            assert_eq!(one(3, 0, 0, 0), Ok((3, 0, 0, 0)));
            assert_eq!(one(0, mj, 0, 0), Ok((0, mj, 0, 0)));
            assert_eq!(one(0, 0, 0, mc), Ok((0, 0, 0, mc)));
            if !l.src_in_cq_data() {
                assert_eq!(one(0, 0, mr, 0), Ok((0, 0, mr, 0)));
            }
            // The field masks are disjoint and cover exactly the used bits.
            let masks = [
                l.encode(3, 0, 0, 0).0,
                l.encode(0, mj, 0, 0).0,
                l.encode(0, 0, mr, 0).0,
                l.encode(0, 0, 0, mc).0,
            ];
            let mut seen = 0u64;
            for m in masks {
                assert_eq!(seen & m, 0, "{mode:?} overlap {m:#x}");
                seen |= m;
            }
            assert_eq!(seen, l.used_bits());
            let unused = if mode == TagMode::Full { 2 } else { 0 };
            assert_eq!(seen.count_ones(), 64 - unused);
        }
    }

    #[test]
    fn full_puts_source_in_cq_data() {
        let l = layout(TagMode::Full, &rich());
        let (tag, data) = l.encode(1, 5, 123_456, 7);
        assert_eq!(data, Some(123_456));
        assert_eq!(l.encode(1, 5, 0, 7).0, tag);
        assert_eq!(l.decode(tag, 99), Ok((1, 5, 99, 7)));
        assert!(l.decode(tag, 1 << 32).unwrap_err().contains("CQ data"));
        // The two bits between job and protocol are unused.
        assert_eq!(l.used_bits() & (0b11 << 60), 0);
        assert_eq!(l.encode(3, 0, 0, 0).0, 0b11 << 62);
    }

    #[test]
    fn auto_resolves() {
        assert_eq!(layout(TagMode::Auto, &rich()).mode(), TagMode::Full);
        assert_eq!(layout(TagMode::Auto, &poor()).mode(), TagMode::Tag1);
        let no_data = TagCaps {
            remote_cq_data: false,
            ..rich()
        };
        let no_directed = TagCaps {
            directed_recv: false,
            ..rich()
        };
        let small_data = TagCaps {
            cq_data_size: 3,
            ..rich()
        };
        for caps in [no_data, no_directed, small_data] {
            assert_eq!(
                layout(TagMode::Auto, &caps).mode(),
                TagMode::Tag1,
                "{caps:?}"
            );
        }
        let exact = TagCaps {
            cq_data_size: 4,
            ..rich()
        };
        assert_eq!(layout(TagMode::Auto, &exact).mode(), TagMode::Full);
    }

    #[test]
    fn forced_full_needs_caps() {
        let cases = [
            (
                TagCaps {
                    remote_cq_data: false,
                    ..rich()
                },
                "FI_REMOTE_CQ_DATA",
            ),
            (
                TagCaps {
                    cq_data_size: 2,
                    ..rich()
                },
                "cq_data_size is 2",
            ),
            (
                TagCaps {
                    directed_recv: false,
                    ..rich()
                },
                "FI_DIRECTED_RECV",
            ),
        ];
        for (caps, want) in cases {
            let e = Layout::choose(TagMode::Full, &caps, 4, 0, 0).unwrap_err();
            assert!(e.contains(want), "{e}");
            assert!(e.contains("ofi_tag_full") && e.contains("ofi_tag_1"), "{e}");
            assert!(e.contains("auto"), "{e}");
        }
        let e = Layout::choose(TagMode::Full, &poor(), 4, 0, 0).unwrap_err();
        assert!(e.contains("FI_REMOTE_CQ_DATA and FI_DIRECTED_RECV"), "{e}");
    }

    #[test]
    fn reserved_bits_shrink_job() {
        let with = |fmt| TagCaps {
            mem_tag_format: fmt,
            ..rich()
        };
        let poor_with = |fmt| TagCaps {
            mem_tag_format: fmt,
            ..poor()
        };
        // No reserved bits: 0 (nothing reported) and a format with its top bit set.
        for fmt in [0, 0xAAAA_AAAA_AAAA_AAAA, u64::MAX] {
            assert_eq!(
                layout(TagMode::Full, &with(fmt)).widths(),
                (2, 28, 0, 32, 0)
            );
            assert_eq!(
                layout(TagMode::Tag1, &poor_with(fmt)).widths(),
                (2, 12, 18, 32, 0)
            );
        }
        // 16 reserved bits.
        let fmt = 0x0000_FFFF_FFFF_FFFF;
        let full = layout(TagMode::Full, &with(fmt));
        assert_eq!(full.widths(), (2, 12, 0, 32, 16));
        let tag2 = layout(TagMode::Tag2, &poor_with(fmt));
        assert_eq!(tag2.widths(), (2, 8, 18, 20, 16));
        // 4 reserved bits in ofi_tag_1.
        let tag1 = layout(TagMode::Tag1, &poor_with(0x0FFF_FFFF_FFFF_FFFF));
        assert_eq!(tag1.widths(), (2, 8, 18, 32, 4));
        for l in [full, tag2, tag1] {
            let r = l.reserved;
            round_trip(&l, 3, l.max_job(), l.max_rank(), l.max_class());
            round_trip(&l, 0, 0, 0, 0);
            round_trip(&l, 2, 1, 3, 4);
            // Protocol bits sit right below the reserved bits.
            assert_eq!(l.encode(3, 0, 0, 0).0, 0b11u64 << (62 - r));
            assert_eq!(l.used_bits() & reserved_mask(r), 0);
            // A tag with a reserved bit set is rejected.
            let (tag, data) = l.encode(1, 1, 1, 1);
            let bad = tag | (1 << 63);
            let e = l.decode(bad, data.unwrap_or(0)).unwrap_err();
            assert!(e.contains(&format!("{bad:#018x}")), "{e}");
        }
        // ofi_tag_1 has 12 job bits: 16 reserved leave none; so does auto on a poor provider.
        for mode in [TagMode::Tag1, TagMode::Auto] {
            let e = Layout::choose(mode, &poor_with(fmt), 1, 0, 0).unwrap_err();
            assert!(e.contains("ofi_tag_1"), "{e}");
            assert!(e.contains("0x0000ffffffffffff"), "{e}");
            assert!(e.contains("reserves 16"), "{e}");
            assert!(e.contains("ofi_tag_2 carries"), "{e}");
        }
        // Exactly one job bit left, then none.
        let l = layout(TagMode::Tag1, &poor_with(u64::MAX >> 11));
        assert_eq!((l.widths().1, l.max_job()), (1, 1));
        assert!(Layout::choose(TagMode::Tag1, &poor_with(u64::MAX >> 12), 1, 0, 0).is_err());
        assert!(Layout::choose(TagMode::Full, &with(u64::MAX >> 28), 1, 0, 0).is_err());
        assert!(Layout::choose(TagMode::Full, &with(1), 1, 0, 0).is_err());
    }

    #[test]
    fn rank_limits() {
        let tag1 = |n| Layout::choose(TagMode::Tag1, &poor(), n, 0, 0);
        assert!(tag1(1 << 18).is_ok());
        assert!(tag1(0).is_ok());
        let e = tag1((1 << 18) + 1).unwrap_err();
        assert!(e.contains("AMNET_OFI_TAG_MODE=ofi_tag_1"), "{e}");
        assert!(e.contains("262143") && e.contains("262145 ranks"), "{e}");
        assert!(e.contains("ofi_tag_full") && e.contains("needs"), "{e}");
        let e = Layout::choose(TagMode::Tag2, &rich(), 300_000, 0, 0).unwrap_err();
        assert!(
            e.contains("ofi_tag_full carries source ranks up to 4294967295"),
            "{e}"
        );
        assert!(!e.contains("needs"), "{e}");
        assert!(Layout::choose(TagMode::Full, &rich(), u32::MAX, 0, 0).is_ok());
        assert!(Layout::choose(TagMode::Auto, &rich(), u32::MAX, 0, 0).is_ok());
        let e = Layout::choose(TagMode::Auto, &poor(), u32::MAX, 0, 0).unwrap_err();
        assert!(e.contains("auto (ofi_tag_1 here"), "{e}");
    }

    #[test]
    fn job_and_class_limits() {
        for (mode, caps) in fixed() {
            let l = layout(mode, &caps);
            let (mj, mc) = (l.max_job(), l.max_class());
            assert_eq!(Layout::choose(mode, &caps, 2, mj, mc), Ok(l));
            let e = Layout::choose(mode, &caps, 2, mj + 1, 0).unwrap_err();
            assert!(e.contains(mode.name()), "{e}");
            assert!(e.contains(&format!("job ids up to {mj}")), "{e}");
            assert!(e.contains(&format!("{}", mj + 1)), "{e}");
            if let Some(c) = mc.checked_add(1) {
                let e = Layout::choose(mode, &caps, 2, 0, c).unwrap_err();
                assert!(e.contains(mode.name()), "{e}");
                assert!(e.contains(&format!("classes up to {mc}")), "{e}");
                assert!(e.contains(&format!("{c}")), "{e}");
                assert!(e.contains("ofi_tag_1 carries"), "{e}");
            }
        }
        let e = Layout::choose(TagMode::Full, &rich(), 2, u64::MAX, 0).unwrap_err();
        assert!(e.contains("no tag mode carries"), "{e}");
        // Reserved bits show in the job limit's message.
        let caps = TagCaps {
            mem_tag_format: 0x00FF_FFFF_FFFF_FFFF,
            ..rich()
        };
        let e = Layout::choose(TagMode::Full, &caps, 2, 1 << 20, 0).unwrap_err();
        assert!(
            e.contains("up to 1048575 (20 bits") && e.contains("reserves 8"),
            "{e}"
        );
    }

    #[test]
    fn receive_masks() {
        for (mode, caps) in fixed() {
            let l = layout(mode, &caps);
            let (mj, mr, mc) = (l.max_job(), l.max_rank(), l.max_class());
            let base = (1u8, mj / 2 + 1, mr / 3 + 1, mc / 5 + 1);
            let (p, j, s, c) = base;
            let tag = l.encode(p, j, s, c).0;
            let (any_tag, any_ignore) = l.recv_any(j, c);
            let (ex_tag, ex_ignore) = l.recv_exact(p, j, s, c);
            assert!(matches(tag, any_tag, any_ignore), "{mode:?}");
            assert!(matches(tag, ex_tag, ex_ignore), "{mode:?}");
            // Other protocol values and sources match recv_any, not recv_exact.
            for other in [l.encode(2, j, s, c).0, l.encode(p, j, s + 1, c).0] {
                assert!(matches(other, any_tag, any_ignore), "{mode:?}");
            }
            assert!(!matches(l.encode(2, j, s, c).0, ex_tag, ex_ignore));
            let other_src = l.encode(p, j, s + 1, c).0;
            // Full leaves the source to directed receive.
            assert_eq!(matches(other_src, ex_tag, ex_ignore), l.src_in_cq_data());
            // Another job or class matches neither.
            for other in [l.encode(p, j - 1, s, c).0, l.encode(p, j, s, c - 1).0] {
                assert!(!matches(other, any_tag, any_ignore), "{mode:?}");
                assert!(!matches(other, ex_tag, ex_ignore), "{mode:?}");
            }
            // Tags with bits outside the layout match no posted receive.
            for bit in 0..64 {
                let b = 1u64 << bit;
                if l.used_bits() & b == 0 {
                    assert!(!matches(tag | b, any_tag, any_ignore), "{mode:?} bit {bit}");
                    assert!(!matches(tag | b, ex_tag, ex_ignore), "{mode:?} bit {bit}");
                }
            }
        }
    }

    #[test]
    fn decode_rejects_stray_bits() {
        for (mode, caps) in fixed() {
            let l = layout(mode, &caps);
            let mut stray = 0;
            for bit in 0..64 {
                let b = 1u64 << bit;
                if l.used_bits() & b == 0 {
                    stray += 1;
                    let e = l.decode(b, 0).unwrap_err();
                    assert!(e.contains(&format!("{b:#018x}")), "{e}");
                    assert!(e.contains(mode.name()), "{e}");
                } else {
                    assert!(l.decode(b, 0).is_ok(), "{mode:?} bit {bit}");
                }
            }
            assert_eq!(stray, if mode == TagMode::Full { 2 } else { 0 });
        }
        // ofi_tag_2 with 8 reserved bits rejects each of them.
        let caps = TagCaps {
            mem_tag_format: 0x00FF_FFFF_FFFF_FFFF,
            ..poor()
        };
        let l = layout(TagMode::Tag2, &caps);
        for bit in 56..64 {
            assert!(l.decode(1u64 << bit, 0).is_err(), "bit {bit}");
        }
        assert!(l.decode(1u64 << 55, 0).is_ok());
    }

    #[test]
    fn shift_helpers_cover_every_width() {
        assert_eq!(low_mask(0), 0);
        assert_eq!(low_mask(1), 1);
        assert_eq!(low_mask(32), u64::from(u32::MAX));
        assert_eq!(low_mask(63), u64::MAX >> 1);
        assert_eq!(low_mask(64), u64::MAX);
        assert_eq!(low_mask(200), u64::MAX);
        assert_eq!(field_mask(2, 62), 0b11 << 62);
        assert_eq!(field_mask(5, 64), 0);
        assert_eq!(put(1, 64), 0);
        assert_eq!(get(u64::MAX, 64, 0), u64::MAX);
        assert_eq!(get(u64::MAX, 3, 64), 0);
        assert_eq!(get(u64::MAX, 0, 10), 0);
    }

    #[test]
    fn choose_never_panics_on_odd_caps() {
        for fmt in [0, 1, 3, u64::MAX, 1 << 63, 1 << 40, 0x0000_0000_FFFF_FFFF] {
            for size in [0, 3, 4, usize::MAX] {
                for mode in [TagMode::Auto, TagMode::Tag1, TagMode::Tag2, TagMode::Full] {
                    let caps = TagCaps {
                        remote_cq_data: size > 0,
                        cq_data_size: size,
                        directed_recv: true,
                        mem_tag_format: fmt,
                    };
                    for (n, j, c) in [(0, 0, 0), (u32::MAX, u64::MAX, u32::MAX)] {
                        if let Ok(l) = Layout::choose(mode, &caps, n, j, c) {
                            assert!(l.decode(u64::MAX, u64::MAX).is_err() || l.reserved == 0);
                        }
                    }
                }
            }
        }
    }
}
