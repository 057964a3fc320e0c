import NIOConcurrencyHelpers

/// Holds a connection's reading while a consumer it feeds is behind.
///
/// A connection hands what it reads to one or more ``InboundBuffer``s (a client's handlers, each
/// stream a caller reads). When one of them answers that it is full, the connection calls
/// ``pause(for:)`` and stops reading; the buffer's demand (``attach(_:)`` sets it) reopens the gate
/// once its consumer took what waited, and reading goes on when no buffer holds it any more. A
/// demand that comes before the pause took hold is not lost: ``pause(for:)`` looks at the buffer
/// again under the gate's lock.
package final class ReadGate: Sendable {
    private struct State {
        var holders: Set<ObjectIdentifier> = []
        var waiters: [CheckedContinuation<Void, Never>] = []
        var onOpen: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// Makes `buffer`'s demand reopen this gate.
    package func attach<Element>(_ buffer: InboundBuffer<Element>) {
        buffer.setOnDemand { [weak self, weak buffer] in
            guard let self, let buffer else { return }
            self.release(ObjectIdentifier(buffer))
        }
    }

    /// Called when the gate opens (the last holder was released), besides waking ``waitUntilOpen()``.
    package func setOnOpen(_ onOpen: (@Sendable () -> Void)?) {
        state.withLockedValue { $0.onOpen = onOpen }
    }

    /// `buffer` refused more: close the gate until it is drained (at once open again if it already was).
    package func pause<Element>(for buffer: InboundBuffer<Element>) {
        state.withLockedValue { state in
            state.holders.insert(ObjectIdentifier(buffer))
            // Its consumer may have taken everything between the refusal and now.
            if !buffer.isPaused { state.holders.remove(ObjectIdentifier(buffer)) }
        }
    }

    /// Whether some buffer holds the gate.
    package var isClosed: Bool { state.withLockedValue { !$0.holders.isEmpty } }

    /// Returns once no buffer holds the gate (at once when none does), or when the task is cancelled.
    package func waitUntilOpen() async {
        guard isClosed else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let open = state.withLockedValue { state -> Bool in
                    if state.holders.isEmpty || Task.isCancelled { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if open { continuation.resume() }
            }
        } onCancel: {
            self.wakeAll()
        }
    }

    /// Opens the gate whatever holds it (the connection ended; nobody will read on).
    package func openAll() {
        state.withLockedValue { $0.holders.removeAll() }
        wakeAll()
    }

    private func release(_ holder: ObjectIdentifier) {
        let (waiters, onOpen) = state.withLockedValue { state -> ([CheckedContinuation<Void, Never>], (@Sendable () -> Void)?) in
            guard state.holders.remove(holder) != nil, state.holders.isEmpty else { return ([], nil) }
            defer { state.waiters = [] }
            return (state.waiters, state.onOpen)
        }
        onOpen?()
        for waiter in waiters { waiter.resume() }
    }

    private func wakeAll() {
        let waiters = state.withLockedValue { state in
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }
}
