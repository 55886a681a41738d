//! Reduction operators of the typed API: a built-in of the table, or a closure.

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use amnet_core::Result;

use super::plain::{self, ElemKind, Plain};
use crate::api::usage;
use crate::builtin::{self, RedOp};
use crate::plan::CallFn;
use crate::types::{fn_flags, FnEntry};

type Closure<T> = Arc<dyn Fn(&T, &T) -> T + Send + Sync>;

/// A reduction operator on elements of type `T`: a built-in ([`RedOp`]) or a closure.
///
/// A closure is called as `f(a, b)` with `a` the operand of the lower participants (or their
/// combination) and `b` the higher one's; it must be associative, since the algorithm chooses
/// the grouping. [`Op::custom`] keeps participant order; [`Op::commutative`] lets the
/// library reorder operands, which admits more algorithms. Each rank passes its own closure
/// (it never travels); every rank must pass one that computes the same function, with the
/// same commutativity (checked mode compares the commutativity).
///
/// The closure runs on whichever thread of the rank moves the collective along, inside an
/// amnet call, never in a handler. If it panics, the call's wait returns
/// [`Error::Usage`](amnet_core::Error::Usage) naming the panic, and the results of that call
/// are not valid (on the other ranks either).
///
/// ```
/// use amnet::coll::{Op, RedOp};
///
/// let sum: Op<f64> = Op::sum();
/// let also_sum: Op<f64> = RedOp::Sum.into();
/// // 2x2 matrix product: associative, not commutative.
/// let matmul = Op::custom(|a: &[f64; 4], b: &[f64; 4]| {
///     [
///         a[0] * b[0] + a[1] * b[2],
///         a[0] * b[1] + a[1] * b[3],
///         a[2] * b[0] + a[3] * b[2],
///         a[2] * b[1] + a[3] * b[3],
///     ]
/// });
/// assert!(sum.is_commutative() && also_sum.is_commutative() && !matmul.is_commutative());
/// ```
pub struct Op<T> {
    kind: Kind<T>,
}

enum Kind<T> {
    Builtin(RedOp, PhantomData<fn(T) -> T>),
    Closure { f: Closure<T>, commutative: bool },
}

impl<T> Clone for Op<T> {
    fn clone(&self) -> Self {
        Op {
            kind: match &self.kind {
                Kind::Builtin(o, p) => Kind::Builtin(*o, *p),
                Kind::Closure { f, commutative } => Kind::Closure {
                    f: f.clone(),
                    commutative: *commutative,
                },
            },
        }
    }
}

impl<T> std::fmt::Debug for Op<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Builtin(o, _) => f.debug_tuple("Op::Builtin").field(o).finish(),
            Kind::Closure { commutative, .. } => f
                .debug_struct("Op::Closure")
                .field("commutative", commutative)
                .finish(),
        }
    }
}

impl<T> From<RedOp> for Op<T> {
    fn from(op: RedOp) -> Op<T> {
        Op::builtin(op)
    }
}

impl<T> From<&Op<T>> for Op<T> {
    fn from(op: &Op<T>) -> Op<T> {
        op.clone()
    }
}

impl<T> Op<T> {
    /// The built-in `op`; the call fails with `Usage` when `T` has no such entry
    /// ([`Plain::KIND`]).
    pub fn builtin(op: RedOp) -> Op<T> {
        Op {
            kind: Kind::Builtin(op, PhantomData),
        }
    }

    /// The built-in `Sum`.
    pub fn sum() -> Op<T> {
        Op::builtin(RedOp::Sum)
    }

    /// The built-in `Prod`.
    pub fn prod() -> Op<T> {
        Op::builtin(RedOp::Prod)
    }

    /// The built-in `Min`.
    pub fn min() -> Op<T> {
        Op::builtin(RedOp::Min)
    }

    /// The built-in `Max`.
    pub fn max() -> Op<T> {
        Op::builtin(RedOp::Max)
    }

    /// The built-in `And` (integers).
    pub fn and() -> Op<T> {
        Op::builtin(RedOp::And)
    }

    /// The built-in `Or` (integers).
    pub fn or() -> Op<T> {
        Op::builtin(RedOp::Or)
    }

    /// The built-in `Xor` (integers).
    pub fn xor() -> Op<T> {
        Op::builtin(RedOp::Xor)
    }

    /// The built-in `MinLoc` (on [`Loc`](crate::Loc) elements).
    pub fn min_loc() -> Op<T> {
        Op::builtin(RedOp::MinLoc)
    }

    /// The built-in `MaxLoc` (on [`Loc`](crate::Loc) elements).
    pub fn max_loc() -> Op<T> {
        Op::builtin(RedOp::MaxLoc)
    }

    /// The closure `f`, applied in participant order (`f(lower, higher)`).
    pub fn custom<F>(f: F) -> Op<T>
    where
        F: Fn(&T, &T) -> T + Send + Sync + 'static,
    {
        Op {
            kind: Kind::Closure {
                f: Arc::new(f),
                commutative: false,
            },
        }
    }

    /// The closure `f`, which the caller promises to be commutative: operands may be
    /// combined in any order.
    pub fn commutative<F>(f: F) -> Op<T>
    where
        F: Fn(&T, &T) -> T + Send + Sync + 'static,
    {
        Op {
            kind: Kind::Closure {
                f: Arc::new(f),
                commutative: true,
            },
        }
    }

    /// Whether operands may be reordered: every built-in, and [`Op::commutative`] closures.
    pub fn is_commutative(&self) -> bool {
        match &self.kind {
            Kind::Builtin(..) => true,
            Kind::Closure { commutative, .. } => *commutative,
        }
    }
}

/// Where a closure's panic is kept until the call's wait reports it.
pub(crate) type PanicSlot = Arc<OnceLock<String>>;

/// What a call passes to the engine for an operator.
pub(crate) struct Resolved {
    /// The function index (a table entry, or the call's own function's).
    pub(crate) func: usize,
    /// The call's own function.
    pub(crate) call_fn: Option<CallFn>,
    /// Where its closure's panic lands.
    pub(crate) panic: Option<PanicSlot>,
}

impl<T: Plain> Op<T> {
    /// The table entry, or the call function, of this operator on `T`, for call `what`.
    pub(crate) fn resolve(&self, what: &'static str) -> Result<Resolved> {
        let es = std::mem::size_of::<T>();
        match &self.kind {
            Kind::Builtin(op, _) => {
                let loc = matches!(op, RedOp::MinLoc | RedOp::MaxLoc);
                let ty = match (T::KIND, loc) {
                    (ElemKind::Value(ty), false) | (ElemKind::Loc(ty), true) => Some(ty),
                    _ => None,
                };
                let func = ty.and_then(|ty| {
                    builtin::builtin_index(*op, ty)
                        .filter(|_| builtin::builtin_elem_size(*op, ty) == es)
                });
                let Some(func) = func else {
                    return Err(usage(
                        what,
                        format!(
                            "the built-in {op:?} has no entry for elements of type {} ({es} \
                             bytes, {:?}); pass a closure (Op::custom or Op::commutative)",
                            std::any::type_name::<T>(),
                            T::KIND
                        ),
                    ));
                };
                Ok(Resolved {
                    func,
                    call_fn: None,
                    panic: None,
                })
            }
            Kind::Closure { f, commutative } => {
                let slot: PanicSlot = Arc::new(OnceLock::new());
                let entry = entry::<T>(f.clone(), *commutative, slot.clone());
                let call_fn = CallFn(entry);
                Ok(Resolved {
                    func: call_fn.index(),
                    call_fn: Some(call_fn),
                    panic: Some(slot),
                })
            }
        }
    }
}

/// A function entry that applies `f` under the [`ReduceFn`](crate::ReduceFn) contract to
/// packed `T` operands, catching a panic into `slot` (after which it writes nothing).
fn entry<T: Plain>(f: Closure<T>, commutative: bool, slot: PanicSlot) -> FnEntry {
    let flags = if commutative { 0 } else { fn_flags::NONCOMM };
    FnEntry::new(
        flags,
        move |out: &mut [u8],
              n: usize,
              left: &[u8],
              nl: usize,
              right: &[u8],
              es: usize,
              _: u32,
              _: u32| {
            if es != std::mem::size_of::<T>() || slot.get().is_some() {
                return;
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                fold(&*f, out, n, left, nl, right);
            }));
            if let Err(p) = r {
                let text = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                let _ = slot.set(text);
            }
        },
    )
}

/// Result `i` = `left[0] ∘ … ∘ left[nl-1] ∘ right[0] ∘ … ∘ right[i]`, folded left to right.
fn fold<T: Plain>(
    f: &(dyn Fn(&T, &T) -> T + Send + Sync),
    out: &mut [u8],
    n: usize,
    left: &[u8],
    nl: usize,
    right: &[u8],
) {
    let es = std::mem::size_of::<T>();
    let fits = |b: &[u8], k: usize| k.checked_mul(es).is_some_and(|len| b.len() >= len);
    if !fits(left, nl) || !fits(right, n) || !fits(out, n) {
        return;
    }
    let mut acc: Option<T> = None;
    for i in 0..nl {
        let Some(x) = plain::read::<T>(&left[i * es..]) else {
            return;
        };
        acc = Some(match acc {
            None => x,
            Some(a) => f(&a, &x),
        });
    }
    for i in 0..n {
        let Some(x) = plain::read::<T>(&right[i * es..]) else {
            return;
        };
        let v = match acc {
            None => x,
            Some(a) => f(&a, &x),
        };
        plain::write(&mut out[i * es..], v);
        acc = Some(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Plain>(e: &FnEntry, n: usize, left: &[T], right: &[T]) -> Vec<u8> {
        let es = std::mem::size_of::<T>();
        let mut out = vec![0u8; n * es];
        (e.f)(
            &mut out,
            n,
            plain::bytes(left),
            left.len(),
            plain::bytes(right),
            es,
            e.flags,
            0,
        );
        out
    }

    #[test]
    fn a_closure_folds_in_order_and_scans() {
        let cat = Op::custom(|a: &u64, b: &u64| a * 10 + b);
        let r = cat.resolve("test").unwrap();
        let e = r.call_fn.as_ref().unwrap().0.clone();
        assert_eq!(e.flags, fn_flags::NONCOMM);
        assert_eq!(r.func, usize::MAX);
        // Reduce: left 1, 2 then right 3.
        assert_eq!(run(&e, 1, &[1u64, 2], &[3u64]), plain::bytes(&[123u64]));
        // Scan after a carry of 1: 12, 123, 1234.
        assert_eq!(
            run(&e, 3, &[1u64], &[2u64, 3, 4]),
            plain::bytes(&[12u64, 123, 1234])
        );
        // A wrong element size writes nothing.
        let mut out = vec![7u8; 8];
        (e.f)(&mut out, 1, &[0; 4], 1, &[0; 4], 4, 0, 0);
        assert_eq!(out, vec![7u8; 8]);
    }

    #[test]
    fn a_panic_is_caught_and_kept() {
        let bad = Op::commutative(|_: &i32, _: &i32| -> i32 { panic!("no way") });
        let r = bad.resolve("test").unwrap();
        let e = r.call_fn.as_ref().unwrap().0.clone();
        assert_eq!(r.func, usize::MAX - 1);
        let _ = run(&e, 1, &[1i32], &[2i32]);
        assert_eq!(r.panic.unwrap().get().map(String::as_str), Some("no way"));
    }

    #[test]
    fn builtins_map_to_the_table_or_say_why_not() {
        let f = Op::<f64>::sum().resolve("t").unwrap().func;
        assert_eq!(
            Some(f),
            builtin::builtin_index(RedOp::Sum, crate::ElemType::F64)
        );
        let l = Op::<crate::Loc<i64>>::min_loc().resolve("t").unwrap().func;
        assert_eq!(
            Some(l),
            builtin::builtin_index(RedOp::MinLoc, crate::ElemType::I64)
        );
        for e in [
            Op::<f32>::xor().resolve("t").err(),
            Op::<u8>::sum().resolve("t").err(),
            Op::<u64>::min_loc().resolve("t").err(),
            Op::<[u64; 2]>::max().resolve("t").err(),
        ] {
            let text = e.expect("refused").to_string();
            assert!(text.contains("has no entry for elements of type"), "{text}");
        }
    }
}
