import Foundation

/// Runs blocking work (reading a child process's pipe, waiting for it to exit) on a thread of its
/// own, never on the threads that run Swift tasks.
///
/// On Linux, Swift concurrency's global executor and `DispatchQueue.global()` share libdispatch's
/// default-QoS worker threads, about as many as there are cores (two here). Test helpers that
/// blocked in `DispatchQueue.global().async` (a CLI run waiting for its output, a Python peer's
/// output read) therefore blocked the very threads the in-process servers and clients needed: a
/// watchdog in a full test run measured tasks waiting 0.7-4.8 s to be scheduled in its first
/// seconds, which is when 5-second connect and request timeouts failed in unrelated tests.
public enum BlockingWork {
    /// Runs `body` on a thread of its own and returns its result, leaving the concurrency pool free.
    public static func run<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    /// Runs throwing `body` on a thread of its own and returns its result or rethrows its error.
    public static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try body() }) }.start()
        }
    }
}
