import Tracing

/// Starts work that outlives the call that asked for it (a connection's life, a reconnect, the
/// timer runner) as a task that inherits none of the caller's task-local values except its trace
/// context.
///
/// Above all it must not inherit a `ServiceGroup`'s graceful shutdown: swift-websocket closes a
/// WebSocket when the graceful shutdown of the task it runs in begins, so a client connected from
/// inside some service's `run()` (another client's, or the app's) had its WebSocket closed when
/// that service was asked to stop, and every reconnect after it closed at once. A client stops
/// when it is told to (its `stop()`/`disconnect()`/`close()`, or its own `run()` as a Service).
///
/// With `preferring`, the task prefers that runtime's event loop (``RealtimeRuntime/taskExecutor``,
/// for a runtime pinned to one loop): work started from that loop, such as a batch of messages it
/// read, then runs on the same thread after the read, without waking a thread of the pool.
package func ownTask<Success: Sendable>(
    priority: TaskPriority? = nil, preferring runtime: RealtimeRuntime? = nil, _ operation: @escaping @Sendable () async -> Success
) -> Task<Success, Never> {
    let context = ServiceContext.current
    let body: @Sendable () async -> Success = {
        guard let context else { return await operation() }
        return await ServiceContext.withValue(context) { await operation() }
    }
    // Detached: the one place such work leaves its caller's task tree (see above).
    if let runtime, #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *) {
        return Task.detached(executorPreference: runtime.taskExecutor, priority: priority, operation: body)
    }
    return Task.detached(priority: priority, operation: body)
}
