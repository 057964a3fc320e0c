public import Foundation
@_exported public import EventSourceClient
import NIOConcurrencyHelpers
import NIOHTTP1
import RealtimeCore

/// The call shapes of IKEventSource (inaka/EventSource), over EventSourceClient's client: code
/// written for it works with `import IKEventSource` in place of `import IKEventSource`.
///
/// As in IKEventSource 3, a source created with ``EventSourceClient/EventSource/init(url:headers:)``
/// does not reconnect by itself: when the connection ends, `onComplete` reports the status, whether
/// reconnecting makes sense (false only after a 204) and the error, and the app calls
/// `connect(lastEventId:)` again.
///
/// For callbacks with automatic reconnection, make the source with a configuration and register
/// the same callbacks; `onComplete` then runs once, when the client gives up or is closed:
/// ```swift
/// let source = EventSource(url: url, configuration: EventSourceConfiguration(headers: ["Authorization": "Bearer t"]))
/// source.onMessage { id, event, data in print(data ?? "") }
/// source.onComplete { status, reconnect, error in print("ended", status ?? 0, error ?? "none") }
/// source.connect()
/// ```
/// Callbacks run on the connection's event loop (keep them short) and buffer nothing: an app that
/// never iterates `EventSourceClient/EventSource/events` keeps no events.
extension EventSource {
    /// An IKEventSource-style source: these headers, no automatic reconnection.
    public convenience init(url: URL, headers: [String: String] = [:]) {
        var httpHeaders = HTTPHeaders()
        for (name, value) in headers { httpHeaders.add(name: name, value: value) }
        self.init(url: url, configuration: EventSourceConfiguration(headers: httpHeaders, maxReconnectAttempts: 0))
    }

    /// The reconnection time in milliseconds; the server changes it with `retry:`.
    public var retryTime: Int {
        Int(reconnectionTime.components.seconds * 1000 + reconnectionTime.components.attoseconds / 1_000_000_000_000_000)
    }

    /// Connects, sending `lastEventId` as `Last-Event-ID` when given; returns at once.
    public func connect(lastEventId: String? = nil) {
        startConnecting(lastEventId: lastEventId)
    }

    /// Closes the connection.
    public func disconnect() { close() }

    /// Called each time the connection opens.
    public func onOpen(_ onOpenCallback: @escaping @Sendable () -> Void) {
        callbacks.withLockedValue { $0.onOpen = onOpenCallback }
    }

    /// Called when the connection ends: the HTTP status (if any), whether reconnecting makes sense,
    /// and the error (if any).
    public func onComplete(_ onComplete: @escaping @Sendable (Int?, Bool?, NSError?) -> Void) {
        callbacks.withLockedValue { $0.onComplete = onComplete }
    }

    /// Called for every event of type `message` (events without an `event:` field).
    public func onMessage(_ onMessageCallback: @escaping @Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void) {
        callbacks.withLockedValue { $0.onMessage = onMessageCallback }
    }

    /// Called for every event of type `event`.
    public func addEventListener(
        _ event: String, handler: @escaping @Sendable (_ id: String?, _ event: String?, _ data: String?) -> Void
    ) {
        callbacks.withLockedValue { $0.listeners[event] = handler }
    }

    /// Removes the listener of `event`.
    public func removeEventListener(_ event: String) {
        callbacks.withLockedValue { _ = $0.listeners.removeValue(forKey: event) }
    }
}

extension EventSourceEvents {
    /// IKEventSource's `events()`: the event types that have a listener. `source.events()` calls
    /// this, while `source.events` without the call is the event sequence.
    public func callAsFunction() -> [String] { source.listenedEventTypes() }
}
