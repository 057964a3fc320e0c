import Foundation

/// A value behind a lock: the compat classes' mutable state, read and written from the caller's
/// thread, the callback queue and the connection's tasks.
// @unchecked Sendable: every access to `value` goes through `lock`.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Carries one of the original libraries' plain (non-`Sendable`) closures or objects to the place
/// that calls it.
// @unchecked Sendable: the app's closures and objects are only called on the one serial queue the
// app chose (`callbackQueue`), or one at a time from the connection's single handler task, as the
// original libraries call them; the app owns their thread-safety as it did with the originals.
struct UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// Runs `work` later on `queue`, never inside the caller's call (the original libraries' callbacks
/// always arrive through their queue).
func deliver(on queue: DispatchQueue, _ work: @escaping () -> Void) {
    let box = UncheckedBox(work)
    queue.async { box.value() }
}

/// Runs one call of the callback API. Unstructured on purpose: those calls return at once and
/// report through a callback or the delegate, so no caller waits that could own the work.
func background(_ body: @escaping @Sendable () async -> Void) {
    // The callback API returns at once; the result goes to a callback, so no caller owns this task.
    Task { await body() }
}
