public import NIOCore

/// What a protocol decides after each poll.
public enum PollDecision: Sendable {
    /// Poll again at once.
    case next
    /// Poll again after a pause (a server that answered too early, a "come back later").
    case nextAfter(Duration)
    /// Stop polling: the session ended normally.
    case stop
}

/// The long-polling loop every protocol runs (Engine.IO's polling transport, SignalR's Long
/// Polling, Spreadbot's polling): one GET in flight at a time, each answer handed to the protocol,
/// until the protocol says stop, a request fails, or the task is cancelled.
///
/// The protocol supplies the policy: how to build each request (URL, query, headers; nil stops the
/// loop before polling, e.g. once the session moved to another transport), how to send it (by
/// default ``HTTPTransport/execute(_:runtime:)``; a protocol with its own authentication passes its
/// own) and what each response means (status codes, body framing, pacing). A failed request ends
/// the loop with its error; the caller's reconnect logic decides what happens next.
public struct LongPoller: Sendable {
    /// A poll's answer: its head and its whole body.
    public typealias Response = (head: HTTPResponseHead, body: ByteBuffer)
    /// Builds the next poll; nil stops the loop without polling.
    public var makeRequest: @Sendable () async throws -> HTTPRequestSpec?
    /// Sends one poll and collects its answer.
    public var execute: @Sendable (HTTPRequestSpec) async throws -> Response
    /// Says what an answer means: poll again now, later, or stop. A thrown error ends the loop.
    public var handleResponse: @Sendable (HTTPResponseHead, ByteBuffer) async throws -> PollDecision
    let runtime: RealtimeRuntime

    /// Makes a poll loop.
    /// - Parameters:
    ///   - runtime: the runtime whose HTTP client and clock the loop uses.
    ///   - makeRequest: builds each poll; nil stops the loop.
    ///   - execute: sends a poll; nil: ``HTTPTransport/execute(_:runtime:)``.
    ///   - handleResponse: reads each answer and decides what comes next.
    public init(
        runtime: RealtimeRuntime = .shared,
        makeRequest: @escaping @Sendable () async throws -> HTTPRequestSpec?,
        execute: (@Sendable (HTTPRequestSpec) async throws -> Response)? = nil,
        handleResponse: @escaping @Sendable (HTTPResponseHead, ByteBuffer) async throws -> PollDecision
    ) {
        self.runtime = runtime
        self.makeRequest = makeRequest
        self.execute = execute ?? { request in try await HTTPTransport.execute(request, runtime: runtime) }
        self.handleResponse = handleResponse
    }

    /// Polls until stopped. Throws the first failure (timeouts, transport errors, whatever the
    /// protocol's response handler throws) and `CancellationError` when cancelled.
    ///
    /// Once a poll was answered the session is open: a later poll that cannot connect (the
    /// server, or a relay on the way, went away between two polls) is the open session lost,
    /// `connectionClosed` at the `established` stage with the connect failure as its underlying
    /// error, as a read cut in the middle of a poll is.
    public func run() async throws {
        var answered = false
        while true {
            try Task.checkCancellation()
            guard let request = try await makeRequest() else { return }
            let head: HTTPResponseHead
            let body: ByteBuffer
            do {
                (head, body) = try await execute(request)
            } catch let error as RealtimeError where answered && error.code == .connectFailed {
                throw RealtimeError(.connectionClosed, "the server could not be reached for the next poll", stage: .established, underlying: error)
            }
            answered = true
            switch try await handleResponse(head, body) {
            case .next: continue
            case .nextAfter(let pause): try await runtime.sleep(for: pause)
            case .stop: return
            }
        }
    }
}
