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
package func ownTask<Success: Sendable>(
    priority: TaskPriority? = nil, _ operation: @escaping @Sendable () async -> Success
) -> Task<Success, Never> {
    let context = ServiceContext.current
    // Detached: the one place such work leaves its caller's task tree (see above).
    return Task.detached(priority: priority) {
        guard let context else { return await operation() }
        return await ServiceContext.withValue(context) { await operation() }
    }
}
