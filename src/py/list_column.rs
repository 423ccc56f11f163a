//! One column of Python values read into flat values, row splits and a
//! presence mask (see `py::lists`, which reads the rows of every column).

use numpy::npyffi::{get_type_object, NpyTypes};
use numpy::{PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

/// The values seen so far, of one kind; ints become floats when a float
/// joins them, as NumPy would promote them.
pub(crate) enum Values {
    /// Nothing yet; room for this many values once the kind is known.
    None(usize),
    Int(Vec<i64>),
    Float(Vec<f64>),
    Bytes {
        offsets: Vec<i64>,
        data: Vec<u8>,
    },
    /// The values of rows that are NumPy arrays, all of one numeric dtype, as
    /// their raw bytes: the dtype stays what it is (int32 stays int32), as
    /// when the general path joins the arrays.
    Array {
        dtype: Py<PyArrayDescr>,
        itemsize: usize,
        data: Vec<u8>,
    },
}

/// Why a column cannot take the fast path: the caller's general path decides.
pub(crate) struct NeedsGeneralPath;

/// Values of one kind as [`Column::push_exact_lists`] appends them: how many,
/// and dropping those after the first `len` (a row's, where one of its
/// values could not be taken).
pub(crate) trait Appended {
    fn count(&self) -> usize;
    fn keep(&mut self, len: usize);
}

impl<T> Appended for Vec<T> {
    fn count(&self) -> usize {
        self.len()
    }
    fn keep(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// A column's strings, Arrow-style (see [`append_string`]).
pub(crate) struct Strings<'a> {
    offsets: &'a mut Vec<i64>,
    data: &'a mut Vec<u8>,
}

impl Appended for Strings<'_> {
    fn count(&self) -> usize {
        self.offsets.len() - 1
    }
    fn keep(&mut self, len: usize) {
        self.offsets.truncate(len + 1);
        self.data.truncate(self.offsets[len] as usize);
    }
}

/// Rows `..to` of an item array, as [`Column::push_exact_lists`] reads them.
#[derive(Clone, Copy)]
pub(crate) struct ListRows {
    items: *const *mut ffi::PyObject,
    to: usize,
}

impl ListRows {
    /// Takes rows from `from` on while each is a list or tuple (of exactly
    /// one value where `splits` is None) whose every value `take` appends to `values`;
    /// returns the first row it did not take, whose values it drops.
    ///
    /// # Safety
    /// As for [`Column::push_exact_lists`]; `take` runs no Python code, and
    /// where it returns false (the run ends) it may have set an error.
    #[inline(always)]
    unsafe fn take<V: Appended>(
        self,
        from: usize,
        values: &mut V,
        splits: &mut Option<Vec<i64>>,
        present: &mut Option<Vec<bool>>,
        mut take: impl FnMut(&mut V, *mut ffi::PyObject) -> bool,
    ) -> usize {
        let mut i = from;
        while i < self.to {
            let row = *self.items.add(i);
            // A list's items are an array it points to; a tuple's follow its header.
            let (row_items, count) = if ffi::PyList_CheckExact(row) != 0 {
                let list = &*row.cast::<ffi::PyListObject>();
                (list.ob_item.cast_const(), list.ob_base.ob_size as usize)
            } else if ffi::PyTuple_CheckExact(row) != 0 {
                let tuple = &*row.cast::<ffi::PyTupleObject>();
                (tuple.ob_item.as_ptr(), tuple.ob_base.ob_size as usize)
            } else {
                break;
            };
            if count != 1 && splits.is_none() {
                break; // the first row of other than one value: `push_row` starts the splits
            }
            let before = values.count();
            if !(0..count).all(|k| take(values, *row_items.add(k))) {
                values.keep(before);
                break;
            }
            if let Some(splits) = splits {
                splits.push(values.count() as i64);
            }
            if let Some(present) = present {
                present.push(true);
            }
            i += 1;
        }
        i
    }
}

/// Bytes of strings copied into one buffer at most: beyond, the general path,
/// which keeps references to the Python objects, writes without a second copy
/// of large values (images) in memory.
pub(crate) const COPY_LIMIT: usize = 64 << 20;

/// Appends one string to Arrow-style `offsets` and `data`; `NeedsGeneralPath` past
/// [`COPY_LIMIT`]: large values take the general path, which borrows them.
#[inline]
pub(crate) fn append_string(
    offsets: &mut Vec<i64>,
    data: &mut Vec<u8>,
    value: &[u8],
) -> Result<(), NeedsGeneralPath> {
    if data.len() + value.len() > COPY_LIMIT {
        return Err(NeedsGeneralPath);
    }
    data.extend_from_slice(value);
    offsets.push(data.len() as i64);
    Ok(())
}

/// The bytes of an exact `bytes` object, or the UTF-8 form of an exact `str`
/// (its characters where it is stored compact and ASCII, else cached in the
/// object by a call); None for any other object, and for a `str` with no
/// UTF-8 form (lone surrogates), whose `UnicodeEncodeError` is then set.
/// Detached (`ATTACHED` false), only what lies in the object as it is: a
/// `bytes`, or a `str` stored compact and ASCII (its characters are its
/// UTF-8); None for any other `str`, with no error set, and no call made.
///
/// # Safety
/// `item` points to a live Python object, and the GIL is held by this thread
/// (attached) or as [`read_columns`] holds it (detached); the slice lives as
/// long as `item` does, and the caller uses it no longer.
#[inline(always)]
pub(crate) unsafe fn exact_string<'a, const ATTACHED: bool>(
    item: *mut ffi::PyObject,
) -> Option<&'a [u8]> {
    let (mut start, mut size): (*mut std::ffi::c_char, ffi::Py_ssize_t) = (std::ptr::null_mut(), 0);
    if ffi::PyBytes_CheckExact(item) != 0 {
        start = ffi::PyBytes_AS_STRING(item).cast_mut();
        size = ffi::Py_SIZE(item);
    } else if ffi::PyUnicode_CheckExact(item) != 0 {
        // Read in place where the characters are their UTF-8, without a call.
        (start, size) = compact_ascii(item);
        if start.is_null() && ATTACHED {
            start = ffi::PyUnicode_AsUTF8AndSize(item, &mut size).cast_mut();
        }
    }
    (!start.is_null()).then(|| std::slice::from_raw_parts(start.cast::<u8>(), size as usize))
}

/// The characters and length of an exact `str` stored compact and ASCII,
/// read from the object; null for any other (and on CPython 3.14, whose
/// `str` flags pyo3 does not describe).
///
/// # Safety
/// `item` is a live object of exactly type `str`, and nothing changes it
/// meanwhile (as for [`exact_string`]). The flags and the layout are those
/// of the CPython headers pyo3 was built for (`PyASCIIObject`): a compact
/// ASCII string's characters follow that header, `length` of them, and are
/// its UTF-8 form. Compact strings are always ready (3.11).
#[inline(always)]
pub(crate) unsafe fn compact_ascii(
    item: *mut ffi::PyObject,
) -> (*mut std::ffi::c_char, ffi::Py_ssize_t) {
    #[cfg(not(Py_3_14))]
    if ffi::PyUnicode_IS_COMPACT_ASCII(item) != 0 {
        let header = item.cast::<ffi::PyASCIIObject>();
        return (header.add(1).cast(), (*header).length);
    }
    let _ = item;
    (std::ptr::null_mut(), 0)
}

/// Where this interpreter keeps an int's digits, for reading small ints
/// without a call: the tutorial's 1 M ints take 3.9 ms through
/// `PyLong_AsLongLong`, which the pass calls for every one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum IntLayout {
    /// CPython 3.11: `ob_size`, after the object's header, is the number of
    /// 30-bit digits, negative for a negative int; the digits follow it.
    SignedSize,
    /// CPython 3.12-3.14: `lv_tag`, after the header, holds the number of
    /// digits from bit 3 up and the sign in bits 0-1 (0 positive, 1 zero, 2
    /// negative); the 30-bit digits follow it.
    Tagged,
    /// Any other interpreter or digit size: every int through the call.
    Call,
}

impl IntLayout {
    /// This interpreter's layout, from its version and `sys.int_info`.
    fn of(py: Python<'_>) -> IntLayout {
        static LAYOUT: std::sync::OnceLock<IntLayout> = std::sync::OnceLock::new();
        *LAYOUT.get_or_init(|| {
            let digits = py
                .import("sys")
                .and_then(|sys| sys.getattr("int_info"))
                .and_then(|info| {
                    let bits: u32 = info.getattr("bits_per_digit")?.extract()?;
                    let size: usize = info.getattr("sizeof_digit")?.extract()?;
                    Ok((bits, size))
                });
            let version = py.version_info();
            match (digits, version.major, version.minor) {
                (Ok((30, 4)), 3, 11) => IntLayout::SignedSize,
                (Ok((30, 4)), 3, 12..=14) => IntLayout::Tagged,
                _ => IntLayout::Call,
            }
        })
    }

    /// The value of an exact int of at most two digits (below 2^60 in size),
    /// read in place; None for larger ones and for [`IntLayout::Call`].
    ///
    /// # Safety
    /// `item` is a live object of exactly type `int`, the GIL is held, and
    /// `self` is [`IntLayout::of`] this interpreter: each layout above is the
    /// one CPython's own headers give for its versions (`Include/cpython/
    /// longintrepr.h`), with `digit` a `uint32_t` as `sys.int_info` confirmed,
    /// and the value starting right after the `PyObject` header pyo3 was built
    /// for. Every int holds at least one digit (zero included: CPython
    /// allocates one for it), and a second digit is read only from an int
    /// that holds two.
    #[inline(always)]
    unsafe fn small(self, item: *mut ffi::PyObject) -> Option<i64> {
        let tag = item.cast::<u8>().add(std::mem::size_of::<ffi::PyObject>());
        let digits = tag.add(std::mem::size_of::<usize>()).cast::<u32>();
        let (count, negative) = match self {
            IntLayout::SignedSize => {
                let size = tag.cast::<isize>().read();
                (size.unsigned_abs(), size < 0)
            }
            IntLayout::Tagged => {
                let tag = tag.cast::<usize>().read();
                (tag >> 3, tag & 3 == 2)
            }
            IntLayout::Call => return None,
        };
        if count > 2 {
            return None;
        }
        // Without a branch on the count or the sign where the data mixes
        // zeros, signs and sizes (ints 0-4 at random took 3.4 ms per 1 M with
        // one, 1.4 ms all zeros): a zero's one digit is read and dropped.
        let low = i64::from(digits.read()) & -i64::from(count != 0);
        let high = if count == 2 {
            i64::from(digits.add(1).read()) << 30
        } else {
            0
        };
        let negate = -i64::from(negative);
        Some(((low | high) ^ negate) - negate)
    }
}

/// The value of an exact int, or None with Python's `OverflowError` set when
/// it does not fit an int64. Detached (`ATTACHED` false), only ints that
/// [`IntLayout::small`] reads; None for others, with no error set, and no call made.
///
/// # Safety
/// As for [`IntLayout::small`]; detached, the GIL held as [`read_columns`] holds it.
#[inline(always)]
pub(crate) unsafe fn exact_int<const ATTACHED: bool>(
    item: *mut ffi::PyObject,
    layout: IntLayout,
) -> Option<i64> {
    if let Some(value) = layout.small(item) {
        return Some(value);
    }
    if !ATTACHED {
        return None;
    }
    let value = ffi::PyLong_AsLongLong(item);
    (value != -1 || ffi::PyErr_Occurred().is_null()).then_some(value)
}

/// Clears the error a failed [`exact_int`] or [`exact_string`] set; detached,
/// they set none (and this thread may not touch Python's error state).
#[inline(always)]
pub(crate) unsafe fn clear_error<const ATTACHED: bool>() {
    if ATTACHED {
        ffi::PyErr_Clear();
    }
}

impl Values {
    /// Appends `item` when it is exactly an int, float, bytes, str or bool;
    /// `NeedsGeneralPath` for anything else (subclasses included), or a kind that does
    /// not mix with the values before it.
    ///
    /// # Safety
    /// `item` points to a live Python object and the GIL is held. Nothing here
    /// runs Python code (no `__index__` or `__float__`: exact types only), so
    /// the container the caller borrowed `item` from cannot change meanwhile.
    unsafe fn push(
        &mut self,
        py: Python<'_>,
        item: *mut ffi::PyObject,
        row: usize,
        layout: IntLayout,
    ) -> PyResult<Result<(), NeedsGeneralPath>> {
        if ffi::PyLong_CheckExact(item) != 0 {
            let Some(value) = exact_int::<true>(item, layout) else {
                ffi::PyErr_Clear(); // an OverflowError: named below with its row
                let shown = Bound::from_borrowed_ptr(py, item);
                // (row, problem): the caller names the column.
                return Err(PyValueError::new_err((
                    row,
                    format!("value {shown} does not fit an int64"),
                )));
            };
            return Ok(self.push_int(value));
        }
        if ffi::PyFloat_CheckExact(item) != 0 {
            return Ok(self.push_float(ffi::PyFloat_AS_DOUBLE(item)));
        }
        if ffi::PyBytes_CheckExact(item) != 0 || ffi::PyUnicode_CheckExact(item) != 0 {
            // Copied before returning, while `item` lives.
            return match exact_string::<true>(item) {
                Some(bytes) => Ok(self.push_bytes(bytes)),
                None => {
                    // Lone surrogates have no UTF-8: named with the row, as any value that cannot be stored.
                    ffi::PyErr_Clear();
                    let shown = Bound::from_borrowed_ptr(py, item).repr()?;
                    Err(PyValueError::new_err((
                        row,
                        format!(
                            "{shown} has no UTF-8 form (it holds a lone surrogate, as a name decoded \
                             with errors=\"surrogateescape\" does): encode it to bytes yourself"
                        ),
                    )))
                }
            };
        }
        if ffi::PyBool_Check(item) != 0 {
            // Checked after int, which it is not exactly; written as 0 or 1.
            return Ok(self.push_int(i64::from(item == ffi::Py_True())));
        }
        Ok(Err(NeedsGeneralPath))
    }

    fn push_int(&mut self, value: i64) -> Result<(), NeedsGeneralPath> {
        match self {
            Values::None(room) => {
                let mut v = Vec::with_capacity(*room);
                v.push(value);
                *self = Values::Int(v);
            }
            Values::Int(v) => v.push(value),
            Values::Float(v) => v.push(value as f64),
            Values::Bytes { .. } | Values::Array { .. } => return Err(NeedsGeneralPath),
        }
        Ok(())
    }

    fn push_float(&mut self, value: f64) -> Result<(), NeedsGeneralPath> {
        match self {
            Values::None(room) => {
                let mut v = Vec::with_capacity(*room);
                v.push(value);
                *self = Values::Float(v);
            }
            Values::Int(v) => {
                let mut floats: Vec<f64> = v.iter().map(|&i| i as f64).collect();
                floats.push(value);
                *self = Values::Float(floats);
            }
            Values::Float(v) => v.push(value),
            Values::Bytes { .. } | Values::Array { .. } => return Err(NeedsGeneralPath),
        }
        Ok(())
    }

    fn push_bytes(&mut self, value: &[u8]) -> Result<(), NeedsGeneralPath> {
        match self {
            Values::None(room) => {
                let mut offsets = Vec::with_capacity(*room + 1);
                offsets.extend([0, value.len() as i64]);
                *self = Values::Bytes {
                    offsets,
                    data: value.to_vec(),
                }
            }
            Values::Bytes { offsets, data } => return append_string(offsets, data, value),
            Values::Int(_) | Values::Float(_) | Values::Array { .. } => {
                return Err(NeedsGeneralPath)
            }
        }
        Ok(())
    }

    /// Appends the values of `array`, a row that is a NumPy array, when it is
    /// exactly an ndarray (a masked array is not), C-contiguous, in the
    /// machine's byte order, of bools, ints or floats, and of the dtype of the
    /// array rows before it; `NeedsGeneralPath` for anything else, and beside rows of
    /// Python values. An empty array's dtype says nothing (`np.array([])` is
    /// float64), as when the general path joins the arrays: it sets the
    /// column's only until a row with values does.
    fn push_array(&mut self, array: &Bound<'_, PyUntypedArray>) -> Result<(), NeedsGeneralPath> {
        let dtype = array.dtype();
        let numeric = matches!(dtype.kind(), b'b' | b'i' | b'u' | b'f')
            && dtype.is_native_byteorder() != Some(false);
        let size: usize = array.shape().iter().product();
        let typed = |room: usize| Values::Array {
            itemsize: dtype.itemsize(),
            dtype: dtype.clone().unbind(),
            data: Vec::with_capacity(room * dtype.itemsize()),
        };
        if size == 0 {
            if let (Values::None(room), true) = (&*self, numeric) {
                *self = typed(*room);
            }
            return Ok(());
        }
        if !numeric || !array.is_c_contiguous() {
            return Err(NeedsGeneralPath);
        }
        // SAFETY: the array is C-contiguous, so its `size` values lie back to
        // back from its data pointer, `itemsize` bytes each; the GIL is held
        // and nothing here runs Python code, so the array (which the row's
        // container holds) stays as it is while its bytes are copied.
        let bytes = unsafe {
            let data = (*array.as_array_ptr()).fields.data as *const u8;
            std::slice::from_raw_parts(data, size * dtype.itemsize())
        };
        match self {
            Values::None(room) => *self = typed(*room),
            Values::Array {
                dtype: first, data, ..
            } if !data.is_empty() && !first.bind(array.py()).is_equiv_to(&dtype) => {
                return Err(NeedsGeneralPath)
            }
            Values::Array { data, .. } if data.is_empty() => *self = typed(0),
            Values::Array { .. } => {}
            _ => return Err(NeedsGeneralPath),
        }
        let Values::Array { data, .. } = self else {
            unreachable!("made an array column above")
        };
        data.extend_from_slice(bytes);
        Ok(())
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Values::None(_) => 0,
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bytes { offsets, .. } => offsets.len() - 1,
            Values::Array { itemsize, data, .. } => data.len() / (*itemsize).max(1),
        }
    }

    /// Appends the values of `later`, read after these and of the kind these
    /// had then ([`Column::part`]): ints join floats that these became as
    /// floats; `NeedsGeneralPath` for strings past [`COPY_LIMIT`] (as reading them in
    /// one run would have found), and for kinds that do not mix.
    fn append(&mut self, later: Values) -> Result<(), NeedsGeneralPath> {
        match (&mut *self, later) {
            (Values::Int(v), Values::Int(more)) => v.extend(more),
            (Values::Float(v), Values::Float(more)) => v.extend(more),
            (Values::Float(v), Values::Int(more)) => v.extend(more.into_iter().map(|i| i as f64)),
            (
                Values::Bytes { offsets, data },
                Values::Bytes {
                    offsets: more_offsets,
                    data: more,
                },
            ) => {
                if data.len() + more.len() > COPY_LIMIT {
                    return Err(NeedsGeneralPath);
                }
                let shift = data.len() as i64;
                offsets.extend(more_offsets[1..].iter().map(|end| end + shift));
                data.extend_from_slice(&more);
            }
            _ => return Err(NeedsGeneralPath),
        }
        Ok(())
    }
}

/// pandas' marker of a missing value, `pd.NA`, once pandas is imported (a
/// value cannot be it before): a row holding it is missing, as one holding
/// None is. pandas' string columns hold it, and hand it over without a copy.
pub(crate) fn pandas_na(py: Python<'_>) -> Option<&'static Py<PyAny>> {
    static NA: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
    if let Some(na) = NA.get(py) {
        return Some(na);
    }
    let modules = py
        .import("sys")
        .and_then(|sys| sys.getattr("modules"))
        .ok()?;
    let pandas = modules.get_item("pandas").ok()?;
    let na = pandas.getattr("NA").ok()?;
    Some(NA.get_or_init(py, || na.unbind()))
}

/// A column being read row by row.
pub(crate) struct Column {
    pub(crate) values: Values,
    /// Row `r` holds `values[splits[r]..splits[r + 1]]`; None while every row
    /// so far held exactly one value.
    pub(crate) splits: Option<Vec<i64>>,
    /// Whether each row has the feature; None while every row so far had it.
    pub(crate) present: Option<Vec<bool>>,
    rows: usize,
    /// Rows expected, for reserving.
    room: usize,
    layout: IntLayout,
    /// [`pandas_na`], or null.
    na: *mut ffi::PyObject,
    /// NumPy's array type (exactly: not a subclass such as a masked array).
    ndarray: *mut ffi::PyTypeObject,
}

impl Column {
    pub(crate) fn new(py: Python<'_>, rows: usize) -> Self {
        Column {
            values: Values::None(rows),
            splits: None,
            present: None,
            rows: 0,
            room: rows,
            layout: IntLayout::of(py),
            na: pandas_na(py).map_or(std::ptr::null_mut(), |na| na.as_ptr()),
            // SAFETY: NumPy's C API, which rust-numpy loads once; the GIL is held.
            ndarray: unsafe { get_type_object(py, NpyTypes::PyArray_Type) },
        }
    }

    /// An empty column of this one's kind, for `rows` of the rows after it:
    /// splits and a presence mask where this one has them (the part's splits
    /// are the ends of its rows in its own values, with no leading 0). None
    /// when no kind is known yet, or for NumPy array rows, which a detached
    /// read cannot take.
    pub(crate) fn part(&self, rows: usize) -> Option<Column> {
        let values = match &self.values {
            Values::Int(_) => Values::Int(Vec::with_capacity(rows)),
            Values::Float(_) => Values::Float(Vec::with_capacity(rows)),
            Values::Bytes { .. } => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Values::Bytes {
                    offsets,
                    data: Vec::new(),
                }
            }
            Values::None(_) | Values::Array { .. } => return None,
        };
        Some(Column {
            values,
            splits: self.splits.as_ref().map(|_| Vec::with_capacity(rows)),
            present: self.present.as_ref().map(|_| Vec::with_capacity(rows)),
            rows: 0,
            room: rows,
            layout: self.layout,
            na: self.na,
            ndarray: self.ndarray,
        })
    }

    /// Appends the rows a [`Column::part`] of this column read, which follow
    /// this column's: `NeedsGeneralPath` where their values cannot join these. A part
    /// has splits or a mask only where this column had them when it was made,
    /// and a column never drops either, so only this column may lack them.
    pub(crate) fn append_part(&mut self, part: Column) -> Result<(), NeedsGeneralPath> {
        debug_assert!(self.splits.is_some() || part.splits.is_none());
        debug_assert!(self.present.is_some() || part.present.is_none());
        let base = self.values.len() as i64;
        self.values.append(part.values)?;
        let rows = part.rows;
        if let Some(splits) = &mut self.splits {
            match part.splits {
                Some(ends) => splits.extend(ends.iter().map(|end| base + end)),
                None => splits.extend((1..=rows as i64).map(|k| base + k)),
            }
        }
        if let Some(present) = &mut self.present {
            match part.present {
                Some(more) => present.extend(more),
                None => present.resize(present.len() + rows, true),
            }
        }
        self.rows += rows;
        Ok(())
    }

    /// Reads rows `from..to` as long as each is plain (see
    /// [`Column::push_scalars`], detached) and returns the first row it did
    /// not take: the caller, attached, reads from there.
    ///
    /// # Safety
    /// As for [`Column::push_scalars`] detached: while [`read_columns`] holds the GIL.
    pub(crate) unsafe fn read_detached(&mut self, rows: Rows, from: usize, to: usize) -> usize {
        let item = &|i: usize| rows.item(i);
        let mut i = from;
        loop {
            let next = self.push_scalars::<false>(item, i, to);
            let next = self.push_exact_lists::<false>(rows, next, to);
            if next == i || next == to {
                return next;
            }
            i = next;
        }
    }

    /// Reads rows from `from` on while each is one value of the column's kind,
    /// in a column of one value per row so far: the common case, in a loop
    /// with one type check a value. Returns the first row it did not take,
    /// which [`Column::push_row`] then reads (or rejects, or names in an error).
    ///
    /// `ATTACHED`: this thread holds the GIL, and may call Python's C API
    /// (ints too large to read in place, `str`s not stored as ASCII). Detached,
    /// a row that needs a call ends the run.
    ///
    /// # Safety
    /// `item(i)` is a live object or null (then the run ends) for every
    /// `i < len`, and as for [`Values::push`]. It is asked again after any
    /// error made here: creating an exception may collect garbage, whose
    /// finalizers may change the container. Detached, as [`read_columns`] runs it.
    unsafe fn push_scalars<const ATTACHED: bool>(
        &mut self,
        item: &impl Fn(usize) -> *mut ffi::PyObject,
        from: usize,
        len: usize,
    ) -> usize {
        if self.splits.is_some() || self.present.is_some() {
            return from;
        }
        let mut i = from;
        match &mut self.values {
            Values::None(_) | Values::Array { .. } => {}
            Values::Int(values) => {
                while i < len {
                    let value = item(i);
                    if value.is_null() {
                        break;
                    } else if ffi::PyLong_CheckExact(value) != 0 {
                        let Some(int) = exact_int::<ATTACHED>(value, self.layout) else {
                            clear_error::<ATTACHED>(); // too large: `push_row` raises it
                            break;
                        };
                        values.push(int);
                    } else if ffi::PyBool_Check(value) != 0 {
                        values.push(i64::from(value == ffi::Py_True()));
                    } else {
                        break;
                    }
                    i += 1;
                }
            }
            Values::Float(values) => {
                while i < len {
                    let value = item(i);
                    if value.is_null() || ffi::PyFloat_CheckExact(value) == 0 {
                        break;
                    }
                    values.push(ffi::PyFloat_AS_DOUBLE(value));
                    i += 1;
                }
            }
            Values::Bytes { offsets, data } => {
                while i < len {
                    let value = item(i);
                    // Copied before the next item is asked for, while `value` lives.
                    if value.is_null() {
                        break;
                    }
                    let Some(bytes) = exact_string::<ATTACHED>(value) else {
                        clear_error::<ATTACHED>(); // not a string, or no UTF-8: `push_row` decides
                        break;
                    };
                    if append_string(offsets, data, bytes).is_err() {
                        break;
                    }
                    i += 1;
                }
            }
        }
        self.rows += i - from;
        i
    }

    /// Reads rows from `from` on while each is a list or tuple of values of
    /// the column's kind, as tightly as [`Column::push_scalars`] reads plain
    /// values: one list object a row, `[[1], [2], ...]`, or lists of any
    /// length once the column has row splits (`[[1, 2], [], ...]`): 42
    /// instructions a row of one int (149 in the loop this replaced, which
    /// asked each item through a closure and loaded rows ahead; the
    /// look-ahead gained nothing here). `ATTACHED` as for
    /// [`Column::push_scalars`]: detached, a large int or a `str` that is not
    /// ASCII ends the run. Any other row (None, a bare value, a value of
    /// another kind) ends it too, and [`Column::push_row`] reads it (or
    /// rejects it, or names it in an error). Returns the first row it did
    /// not take.
    ///
    /// # Safety
    /// `rows` is of a live list or object array, and the GIL is held by this
    /// thread or as [`read_columns`] holds it. The items are read from the
    /// item arrays as they are at the run's start: nothing here runs Python
    /// code, so no container changes, until a call fails and sets an error
    /// (creating it may collect garbage, whose finalizers may change a
    /// container), which ends the run before another item is read.
    unsafe fn push_exact_lists<const ATTACHED: bool>(
        &mut self,
        rows: Rows,
        from: usize,
        to: usize,
    ) -> usize {
        let (items, valid) = rows.items();
        let rows = ListRows {
            items,
            to: to.min(valid),
        };
        let layout = self.layout;
        let Column {
            values,
            splits,
            present,
            ..
        } = self;
        let taken = match values {
            Values::Int(values) => rows.take(from, values, splits, present, |values, value| {
                if ffi::PyLong_CheckExact(value) != 0 {
                    let Some(int) = exact_int::<ATTACHED>(value, layout) else {
                        clear_error::<ATTACHED>(); // too large: `push_row` raises it
                        return false;
                    };
                    values.push(int);
                } else if ffi::PyBool_Check(value) != 0 {
                    values.push(i64::from(value == ffi::Py_True()));
                } else {
                    return false;
                }
                true
            }),
            Values::Float(values) => rows.take(from, values, splits, present, |values, value| {
                let float = ffi::PyFloat_CheckExact(value) != 0;
                if float {
                    values.push(ffi::PyFloat_AS_DOUBLE(value));
                }
                float
            }),
            Values::Bytes { offsets, data } => {
                let mut strings = Strings { offsets, data };
                rows.take(from, &mut strings, splits, present, |strings, value| {
                    let Some(bytes) = exact_string::<ATTACHED>(value) else {
                        clear_error::<ATTACHED>(); // not a string, or no UTF-8: `push_row` decides
                        return false;
                    };
                    append_string(strings.offsets, strings.data, bytes).is_ok()
                })
            }
            Values::None(_) | Values::Array { .. } => from,
        };
        self.rows += taken - from;
        taken
    }

    /// Reads rows from `from` on while each is a C-contiguous NumPy array of
    /// the very dtype object of the column's first values (rows cut from one
    /// array share it, as arrays made by `np.array` of ints or of floats do),
    /// copying its bytes: what [`Values::push_array`] does for such a row,
    /// without comparing the dtypes through NumPy's C API or the general
    /// step's calls (21-29 ns a row there); an empty array of any dtype adds
    /// nothing, as there. A row of other than one value
    /// ends the run while the column has no splits, and any other row too,
    /// which [`Column::push_row`] then reads. Returns the first row it did
    /// not take.
    ///
    /// # Safety
    /// As for [`Column::push_exact_lists`], with the GIL held by this thread.
    unsafe fn push_array_rows(&mut self, rows: Rows, from: usize, to: usize) -> usize {
        let Column {
            values,
            splits,
            present,
            ndarray,
            ..
        } = self;
        let Values::Array {
            dtype,
            itemsize,
            data,
        } = values
        else {
            return from;
        };
        if data.is_empty() {
            return from; // its dtype is that of empty rows so far: `push_array` decides
        }
        let (items, valid) = rows.items();
        let (descr, itemsize) = (dtype.as_ptr(), *itemsize);
        let mut i = from;
        while i < to.min(valid) {
            let row = *items.add(i);
            if ffi::Py_TYPE(row) != *ndarray {
                break;
            }
            // Exactly NumPy's array type, so the object is a `PyArrayObject`.
            let array = &(*row.cast::<numpy::npyffi::PyArrayObject>()).fields;
            let size: usize = (0..array.nd as usize)
                .map(|d| *array.dimensions.add(d) as usize)
                .product();
            if size != 1 && splits.is_none() {
                break; // the first row of other than one value: `push_row` starts the splits
            }
            // An empty row adds nothing, whatever its dtype (`np.array([])`
            // is float64 among rows of ints), as in `push_array`.
            if size > 0
                && (array.descr.cast::<ffi::PyObject>() != descr
                    || array.flags & numpy::npyffi::NPY_ARRAY_C_CONTIGUOUS == 0)
            {
                break;
            }
            // The array is C-contiguous: its `size` values of `itemsize`
            // bytes (its dtype's, the column's) lie back to back from `data`.
            data.extend_from_slice(std::slice::from_raw_parts(
                array.data.cast::<u8>(),
                size * itemsize,
            ));
            if let Some(splits) = splits {
                splits.push((data.len() / itemsize) as i64);
            }
            if let Some(present) = present {
                present.push(true);
            }
            i += 1;
        }
        self.rows += i - from;
        i
    }

    /// Reads rows `from..len`, `item(i)` each: None when one does not fit the fast path.
    ///
    /// # Safety
    /// As for [`Column::push_scalars`].
    pub(crate) unsafe fn read(
        &mut self,
        py: Python<'_>,
        rows: Rows,
        from: usize,
        len: usize,
    ) -> PyResult<Option<()>> {
        let item = &|i: usize| rows.item(i);
        let mut i = from;
        while i < len {
            i = self.push_scalars::<true>(item, i, len);
            i = self.push_exact_lists::<true>(rows, i, len);
            i = self.push_array_rows(rows, i, len);
            if i == len {
                break;
            }
            let row = item(i);
            if row.is_null() {
                // Only if a finalizer run by an error made above shrank the list.
                ffi::PyErr_Clear();
                return Ok(None);
            }
            if self.push_row(py, row)?.is_err() {
                return Ok(None);
            }
            i += 1;
        }
        Ok(Some(()))
    }

    /// Appends one row: None (missing), a scalar, or a list or tuple of them.
    ///
    /// # Safety
    /// As for [`Values::push`].
    unsafe fn push_row(
        &mut self,
        py: Python<'_>,
        item: *mut ffi::PyObject,
    ) -> PyResult<Result<(), NeedsGeneralPath>> {
        let row = self.rows;
        // NaN, where a string is expected, is pandas' (and pyarrow's) mark of
        // a missing string: an object column of strings read by pandas holds it.
        let nan_string = matches!(self.values, Values::Bytes { .. })
            && ffi::PyFloat_CheckExact(item) != 0
            && ffi::PyFloat_AS_DOUBLE(item).is_nan();
        let missing = ffi::Py_IsNone(item) != 0 || item == self.na || nan_string;
        if missing {
            // Nothing to read.
        } else if ffi::PyList_CheckExact(item) != 0 || ffi::PyTuple_CheckExact(item) != 0 {
            let list = ffi::PyList_CheckExact(item) != 0;
            let len = if list {
                ffi::PyList_GET_SIZE(item)
            } else {
                ffi::PyTuple_GET_SIZE(item)
            };
            for i in 0..len {
                // Borrowed, within the length read above: the row holds its
                // items, and nothing runs that could change the row.
                let value = if list {
                    ffi::PyList_GET_ITEM(item, i)
                } else {
                    ffi::PyTuple_GET_ITEM(item, i)
                };
                if self.values.push(py, value, row, self.layout)?.is_err() {
                    return Ok(Err(NeedsGeneralPath));
                }
            }
        } else if ffi::Py_TYPE(item) == self.ndarray {
            // Exactly NumPy's array type, so the object is a `PyUntypedArray`.
            let array = Bound::from_borrowed_ptr(py, item);
            if self.values.push_array(array.cast_unchecked()).is_err() {
                return Ok(Err(NeedsGeneralPath));
            }
        } else if self.values.push(py, item, row, self.layout)?.is_err() {
            return Ok(Err(NeedsGeneralPath));
        }
        let end = self.values.len();
        self.rows += 1;
        if self.splits.is_none() && end != self.rows {
            // The first row without exactly one value: every row before it had one.
            let mut splits = Vec::with_capacity(self.room + 1);
            splits.extend(0..=row as i64);
            self.splits = Some(splits);
        }
        if let Some(splits) = &mut self.splits {
            splits.push(end as i64);
        }
        if missing && self.present.is_none() {
            let mut present = Vec::with_capacity(self.room);
            present.resize(row, true);
            self.present = Some(present);
        }
        if let Some(present) = &mut self.present {
            present.push(!missing);
        }
        Ok(Ok(()))
    }
}

/// Where a column's rows are, borrowed: rows `start..start + len` of a list,
/// or the `len` items of an object array from `items` on.
#[derive(Clone, Copy)]
pub(crate) enum Rows {
    List {
        list: *mut ffi::PyObject,
        start: usize,
        len: usize,
    },
    Items {
        items: *const Py<PyAny>,
        len: usize,
    },
}

// SAFETY: `Rows` points into Python objects, which are read only while the
// GIL is held: by this thread, or as `read_columns` holds it for its
// detached threads (no Python code runs, so no object changes or is freed).
unsafe impl Send for Rows {}
// SAFETY: as for `Send`: every use only reads, under the GIL so held.
unsafe impl Sync for Rows {}

// SAFETY: a `Column`'s two pointers (`na`, `ndarray`) are only compared with
// objects' addresses, never followed; its values are its own.
unsafe impl Send for Column {}
// SAFETY: as for `Send`: shared, its pointers are only read, to be compared.
unsafe impl Sync for Column {}

impl Rows {
    pub(crate) fn len(self) -> usize {
        match self {
            Rows::List { len, .. } | Rows::Items { len, .. } => len,
        }
    }

    /// The rows' item array as it is now, and how many of the rows it holds
    /// (fewer than `len` only where a finalizer shrank a list).
    ///
    /// # Safety
    /// As for [`Rows::item`]; the pointer is valid until Python code next runs.
    #[inline(always)]
    unsafe fn items(self) -> (*const *mut ffi::PyObject, usize) {
        match self {
            Rows::List { list, start, len } => {
                let size = ffi::PyList_GET_SIZE(list) as usize;
                let items = (*list.cast::<ffi::PyListObject>()).ob_item.cast_const();
                (
                    items.add(start.min(size)),
                    len.min(size.saturating_sub(start)),
                )
            }
            // `Py<PyAny>` is `repr(transparent)` over a non-null object pointer.
            Rows::Items { items, len } => (items.cast::<*mut ffi::PyObject>(), len),
        }
    }

    /// Row `i` (`< len`), borrowed; null past a list's current end (a
    /// finalizer run by an error made while reading may shrink it).
    ///
    /// # Safety
    /// The list or array is alive and the GIL held (see [`Rows`]).
    #[inline(always)]
    unsafe fn item(self, i: usize) -> *mut ffi::PyObject {
        match self {
            Rows::List { list, start, .. } => {
                let at = (start + i) as ffi::Py_ssize_t;
                if at < ffi::PyList_GET_SIZE(list) {
                    ffi::PyList_GET_ITEM(list, at)
                } else {
                    std::ptr::null_mut()
                }
            }
            Rows::Items { items, .. } => (*items.add(i)).as_ptr(),
        }
    }
}
