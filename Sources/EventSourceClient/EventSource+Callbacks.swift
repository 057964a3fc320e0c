#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import NIOConcurrencyHelpers
package import RealtimeCore

/// The hook the IKEventSource module builds its callbacks on: one observer of what the connection
/// does, called on the connection's event loop, in order, before an event reaches the ``events``
/// buffer. The IKEventSource module hops every call to its own queue.
extension EventSource {
    /// What the observer is told.
    package enum Observation: Sendable {
        /// The response head was accepted (200 with `text/event-stream`).
        case open
        /// An event, with its type as the parser gave it (see ``Callbacks/unnamedEventType``).
        case event(ServerSentEvent)
        /// The source stopped for good: the status of the last response head (nil when none came)
        /// and the error that ended it (nil after ``close()`` or a 204). A reconnect policy that gave
        /// up is reported with the error that made it give up.
        case complete(status: Int?, error: RealtimeError?)
    }

    /// The observer and the parser option it asked for, kept in the source's state.
    package struct Callbacks: Sendable {
        var observer: (@Sendable (Observation) -> Void)?
        /// The type given to events without an `event:` field: "message" (WHATWG) unless the
        /// observer must tell them from an explicit `event: message` (IKEventSource does).
        var unnamedEventType = "message"
    }

    /// Access to ``Callbacks`` under the source's lock.
    package struct CallbackAccess {
        let source: EventSource

        func withLockedValue<T>(_ body: (inout Callbacks) throws -> T) rethrows -> T {
            try source.state.withLockedValue { try body(&$0.callbacks) }
        }
    }

    /// Sets the observer (before the connection starts); `unnamedEventType` as in ``Callbacks``.
    package func observe(unnamedEventType: String = "message", _ observer: @escaping @Sendable (Observation) -> Void) {
        callbacks.withLockedValue {
            $0.observer = observer
            $0.unnamedEventType = unnamedEventType
        }
    }

    /// Starts the connection (without a consumer of ``events``).
    package func startConnecting() {
        startIfNeeded()
    }

    var unnamedEventType: String { callbacks.withLockedValue { $0.unnamedEventType } }

    func notifyOpen() {
        callbacks.withLockedValue { $0.observer }?(.open)
    }

    func notifyEvent(_ event: ServerSentEvent) {
        callbacks.withLockedValue { $0.observer }?(.event(event))
    }

    func notifyComplete(status: Int?, error: RealtimeError?) {
        guard let observer = callbacks.withLockedValue({ $0.observer }) else { return }
        var cause = error
        if let error, error.code == .reconnectGaveUp, let underlying = error.underlying as? RealtimeError { cause = underlying }
        observer(.complete(status: status, error: cause))
    }
}
