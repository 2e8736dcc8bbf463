//! Locks that stay usable after a panic in a thread that held them.
//!
//! Every mutation kube-sim makes under a `std` lock is a single insert, remove or replace, so the data behind
//! a poisoned lock is still consistent: one panicking task must not take the whole simulator down with it.

use std::sync::{
    LockResult, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// The guard of a lock whether or not it is poisoned.
pub(crate) fn unpoisoned<G>(result: LockResult<G>) -> G {
    result.unwrap_or_else(PoisonError::into_inner)
}

/// Locking a [`Mutex`] whether or not it is poisoned.
pub(crate) trait MutexExt<T: ?Sized> {
    /// Locks, ignoring poisoning.
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        unpoisoned(self.lock())
    }
}

/// Reading and writing a [`RwLock`] whether or not it is poisoned.
pub(crate) trait RwLockExt<T: ?Sized> {
    /// Locks for reading, ignoring poisoning.
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    /// Locks for writing, ignoring poisoning.
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        unpoisoned(self.read())
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        unpoisoned(self.write())
    }
}
