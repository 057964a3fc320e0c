package import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore

/// What the callback layer (IKEventSource's IKEventSource shapes) registered: called on the
/// connection's event loop, before an event reaches the ``EventSource/events`` buffer.
extension EventSource {
    package struct Callbacks: Sendable {
        package var onOpen: (@Sendable () -> Void)?
        package var onMessage: (@Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void)?
        package var onComplete: (@Sendable (Int?, Bool?, NSError?) -> Void)?
        package var listeners: [String: @Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void] = [:]
    }

    /// The callback layer's registrations, under the source's lock.
    package struct CallbackAccess {
        let source: EventSource

        package func withLockedValue<T>(_ body: (inout Callbacks) throws -> T) rethrows -> T {
            try source.state.withLockedValue { try body(&$0.callbacks) }
        }
    }

    /// Starts the connection (without a consumer of ``events``), from `lastEventId` when given.
    package func startConnecting(lastEventId: String?) {
        state.withLockedValue { state in
            if let lastEventId { state.lastEventId = lastEventId }
        }
        startIfNeeded()
    }

    /// The event types with a listener.
    package func listenedEventTypes() -> [String] {
        callbacks.withLockedValue { Array($0.listeners.keys).sorted() }
    }

    func notifyOpen() {
        callbacks.withLockedValue { $0.onOpen }?()
    }

    func notifyEvent(_ event: ServerSentEvent) {
        let (onMessage, listener) = callbacks.withLockedValue { ($0.onMessage, $0.listeners[event.type]) }
        guard onMessage != nil || listener != nil else { return }
        let id: String? = event.lastEventId.isEmpty ? nil : event.lastEventId
        if event.type == "message" { onMessage?(id, event.type, event.data) }
        listener?(id, event.type, event.data)
    }

    func notifyComplete(status: Int?, error: RealtimeError?) {
        guard let onComplete = callbacks.withLockedValue({ $0.onComplete }) else { return }
        var cause = error
        if let error, error.code == .reconnectGaveUp, let underlying = error.underlying as? RealtimeError { cause = underlying }
        let nsError = cause.map {
            NSError(domain: "EventSourceClient", code: Int($0.status?.code ?? 0), userInfo: [NSLocalizedDescriptionKey: $0.description])
        }
        onComplete(status, status != 204, nsError)
    }
}
