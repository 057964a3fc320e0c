public import NIOCore
public import RealtimeCore

extension Spreadbot {
    /// The event loop this client's connections read and write on, every reconnect included: one of
    /// its runtime's loops, chosen when the client is made. Over WebSocket, `onMessage` callbacks
    /// are called on it, by the task that reads the socket.
    public var eventLoop: any EventLoop { configuration.runtime.eventLoop }

    /// A task executor on ``eventLoop``. Code that consumes the messages can run on the thread that
    /// reads them, with `withTaskExecutorPreference(spreadbot.taskExecutor) { ... }`: a message read
    /// then reaches it without waking another thread. Code run this way shares the thread with the
    /// connection's I/O and must not block.
    @available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
    public var taskExecutor: EventLoopTaskExecutor { configuration.runtime.taskExecutor }
}
