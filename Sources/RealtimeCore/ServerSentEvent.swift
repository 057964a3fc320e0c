/// One dispatched Server-Sent Event.
public struct ServerSentEvent: Sendable, Equatable, CustomStringConvertible {
    /// The event type: the last `event:` field of the block, or `message`.
    public var type: String
    /// The `data:` lines joined with LF.
    public var data: String
    /// The last event ID at dispatch time (it persists across events until an `id:` changes it).
    public var lastEventId: String

    /// Makes an event; every parameter is the property of the same name.
    public init(type: String = "message", data: String, lastEventId: String = "") {
        self.type = type
        self.data = data
        self.lastEventId = lastEventId
    }

    /// The same as ``lastEventId`` (the name IKEventSource and LaunchDarkly users know).
    public var id: String { lastEventId }

    /// A readable summary, for logs and messages.
    public var description: String { "ServerSentEvent(type: \(type), id: \(lastEventId), \(data.utf8.count) bytes)" }
}
