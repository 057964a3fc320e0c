public import AsyncHTTPClient
public import Logging
public import NIOCore
public import NIOPosix

/// What every client of this package runs on: threads, one HTTP client, a logger and a clock.
///
/// Clients of different protocols in one process should share one runtime, so they share event
/// loops and connection pools. ``shared`` is the process-wide default.
///
/// The runtime does not own what it is given: an `HTTPClient` you pass in is yours to shut down.
public struct RealtimeRuntime: Sendable {
    /// The event loops every connection runs on.
    public var eventLoopGroup: any EventLoopGroup
    /// The HTTP client used by the SSE, long-polling and POST transports.
    public var httpClient: HTTPClient
    /// The logger. The default discards everything; pass your own to see what happens.
    public var logger: Logger
    /// The clock every timer reads (heartbeats, timeouts, backoff). Tests inject a manual clock.
    public var clock: any Clock<Duration>

    public init(
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        httpClient: HTTPClient = .shared,
        logger: Logger = Logger(label: "swift-realtime", factory: { _ in SwiftLogNoOpLogHandler() }),
        clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.eventLoopGroup = eventLoopGroup
        self.httpClient = httpClient
        self.logger = logger
        self.clock = clock
    }

    /// The process-wide runtime: NIO's singleton event loop group, `HTTPClient.shared`, a silent
    /// logger and the continuous clock.
    public static let shared = RealtimeRuntime()

    /// A copy with another logger, keeping everything else shared.
    public func logging(to logger: Logger) -> RealtimeRuntime {
        var copy = self
        copy.logger = logger
        return copy
    }

    /// Sleeps on the runtime's clock.
    package func sleep(for duration: Duration) async throws {
        guard duration > .zero else { return }
        try await clock.sleep(for: duration)
    }
}
