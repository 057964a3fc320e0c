public import NIOCore
public import RealtimeCore

extension HubConnection {
    /// The event loop this connection reads and writes on, every reconnect included: one of its
    /// runtime's loops, chosen when the connection is made. Handlers registered with `on` run on it.
    public var eventLoop: any EventLoop { options.runtime.eventLoop }

    /// A task executor on ``eventLoop``. Code that consumes this connection's messages can run on the
    /// thread that reads them:
    ///
    /// ```swift
    /// try await withTaskExecutorPreference(connection.taskExecutor) {
    ///     for try await item in try await connection.stream(method: "countTo", arguments: 10) as HubStream<Int> {
    ///         print(item)
    ///     }
    /// }
    /// ```
    ///
    /// A message read then reaches the loop's body without waking another thread (with Swift
    /// Concurrency's default executor it wakes a thread of its pool). Code run this way shares the
    /// thread with the connection's I/O and must not block.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    public var taskExecutor: EventLoopTaskExecutor { options.runtime.taskExecutor }
}
