public import NIOCore
public import RealtimeCore

extension EventSource {
    /// The event loop this source's connection reads on, every reconnect included: one of its
    /// runtime's loops, chosen when the source is made.
    public var eventLoop: any EventLoop { runtime.eventLoop }

    /// A task executor on ``eventLoop``. Code that consumes the events can run on the thread that
    /// reads them:
    ///
    /// ```swift
    /// try await withTaskExecutorPreference(source.taskExecutor) {
    ///     for try await event in source.events { print(event.data) }
    /// }
    /// ```
    ///
    /// An event read then reaches the loop's body without waking another thread (with Swift
    /// Concurrency's default executor it wakes a thread of its pool). Code run this way shares the
    /// thread with the connection's I/O and must not block.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    public var taskExecutor: EventLoopTaskExecutor { runtime.taskExecutor }
}
