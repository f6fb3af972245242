//! The one place that decides how a library's functions are reached.
//!
//! Each -sys crate's generated `functions*.rs` is a list of declarations
//! wrapped in `functions! { unsafe extern "C" { ... } }`. That macro forwards
//! to [`__define_functions!`](crate::__define_functions), which emits a
//! function table type with one method per C function:
//!
//! - default: the library is opened at run time and every symbol resolved once,
//!   when the table is built; a symbol the library lacks is stored as absent and
//!   its method returns [`MissingSymbol`](crate::loader::MissingSymbol);
//! - feature `link`: the methods call ordinary `extern "C"` declarations that
//!   the linker resolves, and return `Ok` unless the function was marked
//!   absent at run time (below).
//!
//! In both modes the table's builder marks absent the functions whose ABI
//! differs in the library version actually loaded (`forget_symbols`, from
//! the version read at run time): a library older than the headers (CUDA 12,
//! cuDNN 8, cuBLAS 12) exports some names with another signature, and a call
//! through these declarations would pass the wrong arguments. Linking does not
//! change which version runs (the system loader picks the file at start-up),
//! so the guard is kept in `link` mode too.
//!
//! The methods have the same names and signatures in both modes, so the
//! feature is additive.

/// The return type of a declaration, `()` when it has none.
#[doc(hidden)]
#[macro_export]
macro_rules! __ret {
    () => {
        ()
    };
    ($t:ty) => {
        $t
    };
}

/// Emit a function table for one library. See the module docs.
#[doc(hidden)]
#[macro_export]
macro_rules! __define_functions {
    (
        $(#[$meta:meta])*
        table $Api:ident;
        unsafe extern "C" {
            $(
                pub fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) $( -> $ret:ty )? ;
            )*
        }
    ) => {
        /// The symbols' positions in the table's `SYMBOLS`. The last
        /// variant is a sentinel (no symbol), so that a table with no
        /// functions still has a variant (`repr(usize)` refuses an empty
        /// enum).
        #[allow(non_camel_case_types, dead_code, clippy::enum_variant_names)]
        #[repr(usize)]
        enum __Sym { $( $name, )* __sentinel_no_symbol }

        $(#[$meta])*
        pub struct $Api {
            info: $crate::loader::LibraryInfo,
            #[cfg(not(feature = "link"))]
            _lib: $crate::loader::libloading::Library,
            /// The address of the first symbol resolved (see `address_of_any`).
            #[cfg(not(feature = "link"))]
            any: ::core::option::Option<usize>,
            $(
                #[cfg(not(feature = "link"))]
                $name: ::core::option::Option<unsafe extern "C" fn( $( $ty ),* ) $( -> $ret )?>,
                /// Linked, and not marked absent for the version loaded.
                #[cfg(feature = "link")]
                $name: bool,
            )*
        }

        #[cfg(feature = "link")]
        pub(crate) mod __linked {
            #[allow(unused_imports)]
            use super::*;
            unsafe extern "C" {
                $( pub fn $name( $( $arg : $ty ),* ) $( -> $ret )?; )*
            }
        }

        impl ::core::fmt::Debug for $Api {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.debug_struct(stringify!($Api)).field("info", &self.info).finish_non_exhaustive()
            }
        }

        #[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]
        impl $Api {
            /// Every function this table declares, in the order of the bindings.
            pub const SYMBOLS: &'static [&'static str] = &[ $( stringify!($name) ),* ];

            /// Build the table from an opened library, resolving every symbol once.
            ///
            /// Each symbol goes through one non-generic lookup
            /// ([`symbol_address`]($crate::loader::symbol_address)) and is
            /// given its type here: a typed lookup per symbol instantiated
            /// the loader's generic code once per distinct signature, most
            /// of what these crates cost to compile.
            #[cfg(not(feature = "link"))]
            pub(crate) fn resolve(
                lib: $crate::loader::libloading::Library,
                info: $crate::loader::LibraryInfo,
            ) -> Self {
                #[allow(unused_mut)] // a table with no functions never sets it
                let mut any = ::core::option::Option::None;
                Self {
                    $(
                        $name: match $crate::loader::symbol_address(
                            &lib,
                            concat!(stringify!($name), "\0").as_bytes(),
                            &mut any,
                        ) {
                            // SAFETY: a non-null address of the symbol of
                            // this name, whose C declaration is the pointer
                            // type (the bindings were generated from it);
                            // data and function pointers have one size and
                            // representation on every platform this crate
                            // loads libraries on (as libloading's typed
                            // lookup assumes); the Library it came from is
                            // stored in the same table (`_lib`), so it
                            // outlives every copy of the pointer.
                            ::core::option::Option::Some(p) => ::core::option::Option::Some(unsafe {
                                ::core::mem::transmute::<
                                    *mut ::core::ffi::c_void,
                                    unsafe extern "C" fn( $( $ty ),* ) $( -> $ret )?,
                                >(p)
                            }),
                            ::core::option::Option::None => ::core::option::Option::None,
                        },
                    )*
                    info,
                    any,
                    _lib: lib,
                }
            }

            /// The position of `symbol` in [`SYMBOLS`](Self::SYMBOLS).
            fn index_of(symbol: &str) -> ::core::option::Option<usize> {
                Self::SYMBOLS.iter().position(|s| *s == symbol)
            }

            /// Treat these symbols as absent even though the library exports
            /// them (their ABI differs in this library's version).
            pub(crate) fn forget_symbols(&mut self, skip: &[&str]) {
                for s in skip {
                    if let ::core::option::Option::Some(i) = Self::index_of(s) {
                        self.forget_index(i);
                    }
                }
            }

            /// Mark the `i`-th symbol absent. Matched by position (one
            /// integer switch), not by name: a chain of string compares
            /// per symbol cost more to compile than the lookup saves.
            fn forget_index(&mut self, i: usize) {
                // Read even when the table declares no function.
                let _ = i;
                $(
                    if i == __Sym::$name as usize {
                        #[cfg(not(feature = "link"))]
                        { self.$name = ::core::option::Option::None; }
                        #[cfg(feature = "link")]
                        { self.$name = false; }
                        return;
                    }
                )*
            }

            /// Whether the `i`-th symbol is present (see `forget_index`).
            fn present_index(&self, i: usize) -> bool {
                let _ = i;
                $(
                    if i == __Sym::$name as usize {
                        #[cfg(not(feature = "link"))]
                        { return ::core::matches!(self.$name, ::core::option::Option::Some(_)); }
                        #[cfg(feature = "link")]
                        { return self.$name; }
                    }
                )*
                false
            }

            /// The address of some function of the library (the first one
            /// resolved), to ask the loader which file it came from.
            #[cfg(not(feature = "link"))]
            pub(crate) fn address_of_any(&self) -> Option<*const ::core::ffi::c_void> {
                self.any.map(|a| a as *const ::core::ffi::c_void)
            }

            /// The table for a library linked at build time.
            #[cfg(feature = "link")]
            pub(crate) fn linked(info: $crate::loader::LibraryInfo) -> Self {
                Self { info, $( $name: true, )* }
            }

            /// Where the library came from and its version.
            pub fn info(&self) -> &$crate::loader::LibraryInfo {
                &self.info
            }

            /// Record the file the loader actually opened.
            #[allow(dead_code)]
            pub(crate) fn set_path(&mut self, p: ::std::path::PathBuf) {
                self.info.path = Some(p);
            }

            /// Record the version once it has been asked of the library.
            pub(crate) fn set_version(&mut self, v: $crate::loader::Version) {
                self.info.version = Some(v);
            }

            /// Whether the library provides `symbol` (when linked: declared,
            /// and not marked absent for the version loaded).
            pub fn has_symbol(&self, symbol: &str) -> bool {
                Self::index_of(symbol).is_some_and(|i| self.present_index(i))
            }

            /// The declared functions this library does not provide.
            pub fn missing_symbols(&self) -> ::std::vec::Vec<&'static str> {
                Self::SYMBOLS.iter().copied().filter(|s| !self.has_symbol(s)).collect()
            }

            $(
                /// Calls the C function of the same name.
                ///
                /// # Errors
                /// [`MissingSymbol`]($crate::loader::MissingSymbol) when the loaded
                /// library does not provide it.
                ///
                /// # Safety
                /// The C function's own contract: valid pointers, live handles,
                /// sizes that match the buffers.
                #[inline]
                pub unsafe fn $name(
                    &self, $( $arg : $ty ),*
                ) -> ::core::result::Result<$crate::__ret!($($ret)?), $crate::loader::MissingSymbol> {
                    #[cfg(not(feature = "link"))]
                    {
                        match self.$name {
                            // SAFETY: the caller upholds the C contract (this
                            // fn is unsafe); the pointer is live (see `resolve`).
                            Some(f) => Ok(unsafe { f( $( $arg ),* ) }),
                            None => Err(self.info.missing(stringify!($name))),
                        }
                    }
                    #[cfg(feature = "link")]
                    {
                        if !self.$name {
                            return Err(self.info.missing(stringify!($name)));
                        }
                        // SAFETY: the caller upholds the C contract; the
                        // function's ABI is the loaded version's (not marked
                        // absent above).
                        Ok(unsafe { __linked::$name( $( $arg ),* ) })
                    }
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::loader::LibraryInfo;

    fn info() -> LibraryInfo {
        LibraryInfo {
            library: "test",
            path: None,
            source: None,
            version: None,
        }
    }

    /// A table that declares no function (the enum of positions needs its
    /// sentinel to compile).
    #[allow(dead_code)] // the table's setters
    mod empty {
        crate::__define_functions! {
            /// No functions.
            table Empty;
            unsafe extern "C" {}
        }

        #[test]
        fn empty_table_knows_no_symbol() {
            assert!(Empty::SYMBOLS.is_empty());
            #[cfg(feature = "link")]
            let mut t = Empty::linked(super::info());
            #[cfg(not(feature = "link"))]
            let mut t = {
                // SAFETY: the C library of the test process, already loaded;
                // opening it runs no initializer of ours.
                let lib = unsafe { libloading::Library::new("libc.so.6") }
                    .unwrap_or_else(|e| panic!("libc: {e}"));
                Empty::resolve(lib, super::info())
            };
            assert!(!t.has_symbol("getpid"));
            assert!(!t.has_symbol(""));
            t.forget_symbols(&["getpid"]);
            assert!(t.missing_symbols().is_empty());
            #[cfg(not(feature = "link"))]
            assert!(t.address_of_any().is_none());
        }
    }

    /// A table over the C library (resolved at run time): positions map to
    /// the right symbol, and a call through it equals the linked call.
    #[cfg(all(not(feature = "link"), target_os = "linux"))]
    #[allow(dead_code)] // the table's setters
    mod libc_table {
        crate::__define_functions! {
            /// Three functions of the C library, one it lacks.
            table LibC;
            unsafe extern "C" {
                pub fn getpid() -> ::core::ffi::c_int;
                pub fn cudnn_rs_not_in_libc(x: ::core::ffi::c_int);
                pub fn strlen(s: *const ::core::ffi::c_char) -> usize;
            }
        }

        #[test]
        fn table_calls_what_the_linker_calls() {
            // SAFETY: as in `empty`.
            let lib = unsafe { libloading::Library::new("libc.so.6") }
                .unwrap_or_else(|e| panic!("libc: {e}"));
            let mut t = LibC::resolve(lib, super::info());
            assert_eq!(LibC::SYMBOLS, &["getpid", "cudnn_rs_not_in_libc", "strlen"]);
            assert!(t.has_symbol("getpid") && t.has_symbol("strlen"));
            assert!(!t.has_symbol("cudnn_rs_not_in_libc"));
            assert!(!t.has_symbol("__sentinel_no_symbol"));
            assert_eq!(t.missing_symbols(), vec!["cudnn_rs_not_in_libc"]);
            assert!(t.address_of_any().is_some());
            // SAFETY: getpid takes nothing; strlen gets a NUL-terminated string.
            unsafe {
                assert_eq!(t.getpid(), Ok(libc::getpid()));
                assert_eq!(t.strlen(c"four".as_ptr()), Ok(4));
                let e = t.cudnn_rs_not_in_libc(1).err().map(|e| e.symbol);
                assert_eq!(e, Some("cudnn_rs_not_in_libc"));
            }
            // Forgetting the last one leaves the first.
            t.forget_symbols(&["strlen", "not_declared"]);
            assert!(t.has_symbol("getpid") && !t.has_symbol("strlen"));
            // SAFETY: as above.
            assert!(unsafe { t.strlen(c"x".as_ptr()) }.is_err());
        }
    }
}
