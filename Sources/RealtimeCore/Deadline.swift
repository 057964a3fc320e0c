import NIOConcurrencyHelpers

/// Runs an operation whose first phase (connect, handshake) must finish within a time limit,
/// even if the operation itself does not react to cancellation during that phase.
///
/// If the limit passes while `isPastDeadlinePhase()` is still false, `abandon()` is called, the
/// operation is cancelled and left to finish on its own, and the caller gets `timeoutError` at once.
/// The same happens when the caller is cancelled. Nothing waits on a peer that never answers.
package enum Deadline {
    package static func run<T: Sendable>(
        within limit: Duration,
        runtime: RealtimeRuntime,
        isPastDeadlinePhase: @escaping @Sendable () -> Bool,
        abandon: @escaping @Sendable () -> Void,
        timeoutError: RealtimeError,
        _ operation: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let slot = NIOLockedValueBox(Slot<T>.empty)

        @Sendable func finish(_ result: Result<T, any Error>) {
            let continuation = slot.withLockedValue { slot -> CheckedContinuation<T, any Error>? in
                switch slot {
                case .empty:
                    slot = .finished(result)
                    return nil
                case .waiting(let continuation):
                    slot = .delivered
                    return continuation
                case .finished, .delivered:
                    return nil
                }
            }
            continuation?.resume(with: result)
        }

        // Unstructured on purpose: on the deadline the caller gets its error at once while the
        // operation, which may not react to cancellation in its first phase, is left to end by itself.
        let operationTask = Task {
            do {
                finish(.success(try await operation()))
            } catch {
                finish(.failure(error))
            }
        }
        let timers = runtime.timers
        let timer = timers.schedule(after: limit) {
            if !isPastDeadlinePhase() {
                abandon()
                // Deliver the timeout before cancelling: cancellation makes the operation fail on
                // its own (a closed channel), and that error must not win the race.
                finish(.failure(timeoutError))
                operationTask.cancel()
            }
        }
        defer { timers.cancel(timer) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let early = slot.withLockedValue { slot -> Result<T, any Error>? in
                    if case .finished(let result) = slot {
                        slot = .delivered
                        return result
                    }
                    slot = .waiting(continuation)
                    return nil
                }
                if let early { continuation.resume(with: early) }
            }
        } onCancel: {
            timers.cancel(timer)
            // Once past the first phase the operation reacts to cancellation itself: wait for it.
            if !isPastDeadlinePhase() {
                abandon()
                finish(.failure(CancellationError()))
            }
            operationTask.cancel()
        }
    }

    private enum Slot<T: Sendable> {
        case empty
        case waiting(CheckedContinuation<T, any Error>)
        case finished(Result<T, any Error>)
        case delivered
    }
}
