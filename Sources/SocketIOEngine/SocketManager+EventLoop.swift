public import NIOCore
public import RealtimeCore

extension SocketManager {
    /// The event loop this manager's connection reads and writes on, every reconnect included: one of
    /// its runtime's loops, chosen when the manager is made. Handlers registered with `on` run on it.
    public var eventLoop: any EventLoop { runtime.eventLoop }

    /// A task executor on ``eventLoop``. Code that consumes the sockets' events can run on the thread
    /// that reads them:
    ///
    /// ```swift
    /// await withTaskExecutorPreference(manager.taskExecutor) {
    ///     for await event in socket.events(named: "tick") { print(event.arguments) }
    /// }
    /// ```
    ///
    /// An event read then reaches the loop's body without waking another thread (with Swift
    /// Concurrency's default executor it wakes a thread of its pool). Code run this way shares the
    /// thread with the connection's I/O and must not block.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    public var taskExecutor: EventLoopTaskExecutor { runtime.taskExecutor }
}

extension SocketIOClient {
    /// The event loop of this socket's manager (``SocketManager/eventLoop``); nil once the manager is gone.
    public var eventLoop: (any EventLoop)? { manager?.eventLoop }

    /// The task executor of this socket's manager (``SocketManager/taskExecutor``); nil once the manager is gone.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    public var taskExecutor: EventLoopTaskExecutor? { manager?.taskExecutor }
}
