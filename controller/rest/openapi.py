"""The OpenAPI 3 document of the REST admin API (served at ``/openapi.json``; ``api.py`` implements it).

A test checks that every route of the application is here and every path here is routed, and
schemathesis fuzzes the API against this document (no 5xx, responses conform).
"""

from __future__ import annotations

from typing import Any

NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^_?[A-Za-z0-9.-]+$"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {400: "Bad name, body or argument", 404: "Not found", 409: "Conflict (exists, or another workflow runs)",
            412: "Precondition failed", 503: "A segment store cannot be reached", 504: "Not finished in time"}
    return {str(status): _json(_ref("Error"), text[status]) for status in (*statuses, 503)}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


SCOPE = {"name": "scope", "in": "path", "required": True, "schema": NAME}
STREAM = {"name": "stream", "in": "path", "required": True, "schema": NAME}
GROUP = {"name": "group", "in": "path", "required": True, "schema": NAME}
TABLE = {"name": "table", "in": "path", "required": True, "schema": NAME}

SEGMENT = {"type": "object", "required": ["segmentId", "number", "epoch", "creationTime", "keyStart", "keyEnd"],
           "properties": {"segmentId": {"type": "integer"}, "number": {"type": "integer"},
                          "epoch": {"type": "integer"}, "creationTime": {"type": "integer"},
                          "keyStart": {"type": "number"}, "keyEnd": {"type": "number"},
                          "startOffset": {"type": "integer", "description": "the head: the offset of the first "
                                                                            "byte kept (after truncation)"},
                          "tailOffset": {"type": "integer", "description": "the offset one past the last byte "
                                                                           "written (the segment's length over "
                                                                           "its life)"},
                          "bytesKept": {"type": "integer", "description": "tailOffset - startOffset: the bytes "
                                                                          "readable now"},
                          "sealed": {"type": "boolean"}}}

CUT = {"type": "object", "description": "segment id -> offset (-1: a segment not started yet)",
       "additionalProperties": {"type": "integer"}}

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["code", "message"],
              "properties": {"code": {"type": "string"}, "message": {"type": "string"}}},
    "Scope": {"type": "object", "required": ["scopeName"], "properties": {"scopeName": NAME}},
    "ScopeList": {"type": "object", "required": ["scopes"],
                  "properties": {"scopes": {"type": "array", "items": _ref("Scope")}}},
    "StreamName": {"type": "object", "required": ["scopeName", "streamName"],
                   "properties": {"scopeName": NAME, "streamName": NAME}},
    "StreamList": {"type": "object", "required": ["streams"],
                   "properties": {"streams": {"type": "array", "items": _ref("StreamName")}}},
    "ScalingPolicy": {"type": "object", "properties": {
        "type": {"type": "string", "enum": ["FIXED_NUM_SEGMENTS", "BY_RATE_IN_KBYTES_PER_SEC",
                                            "BY_RATE_IN_EVENTS_PER_SEC"]},
        "targetRate": {"type": "integer"}, "scaleFactor": {"type": "integer"},
        "minSegments": {"type": "integer", "minimum": 1, "maximum": 10000}}},
    "RetentionPolicy": {"type": "object", "nullable": True, "required": ["type", "value"], "properties": {
        "type": {"type": "string", "enum": ["TIME", "SIZE"], "description": "TIME: milliseconds, SIZE: bytes"},
        "value": {"type": "integer", "minimum": 0}, "maxValue": {"type": "integer", "minimum": 0}}},
    "StreamConfiguration": {"type": "object", "properties": {
        "scalingPolicy": _ref("ScalingPolicy"), "retentionPolicy": _ref("RetentionPolicy"),
        "tags": {"type": "array", "maxItems": 127, "items": {"type": "string", "minLength": 1, "maxLength": 255}}}},
    "NewStream": {"allOf": [_ref("StreamConfiguration"),
                            {"type": "object", "required": ["streamName"], "properties": {"streamName": NAME}}]},
    "Segment": SEGMENT,
    "Stream": {"type": "object",
               "required": ["scopeName", "streamName", "state", "scalingPolicy", "retentionPolicy", "tags",
                            "currentEpoch", "segments", "truncation", "subscribers"],
               "properties": {"scopeName": NAME, "streamName": NAME, "state": {"type": "string"},
                              "scalingPolicy": _ref("ScalingPolicy"), "retentionPolicy": _ref("RetentionPolicy"),
                              "tags": {"type": "array", "items": {"type": "string"}},
                              "currentEpoch": {"type": "integer"},
                              "segments": {"type": "array", "items": _ref("Segment")},
                              "truncation": {
                                  "type": "object", "required": ["streamCut", "bytesBefore"],
                                  "description": "the head: where the stream was last truncated, and the bytes "
                                                 "before it over the stream's life",
                                  "properties": {"streamCut": CUT, "bytesBefore": {"type": "integer"}}},
                              "subscribers": {
                                  "type": "array", "description": "reader groups holding data back "
                                                                  "(consumption-based retention)",
                                  "items": {"type": "object", "required": ["name", "streamCut", "updateTime"],
                                            "properties": {"name": {"type": "string"}, "streamCut": CUT,
                                                           "updateTime": {"type": "integer"}}}}}},
    "SegmentList": {"type": "object", "required": ["segments"],
                    "properties": {"segments": {"type": "array", "items": _ref("Segment")}}},
    "Epochs": {"type": "object", "required": ["currentEpoch", "epochs"], "properties": {
        "currentEpoch": {"type": "integer"},
        "epochs": {"type": "array", "items": {"type": "object",
                                              "required": ["epoch", "referenceEpoch", "creationTime", "segments"],
                                              "properties": {"epoch": {"type": "integer"},
                                                             "referenceEpoch": {"type": "integer"},
                                                             "creationTime": {"type": "integer"},
                                                             "segments": {"type": "array",
                                                                          "items": _ref("Segment")}}}}}},
    "StreamState": {"type": "object", "required": ["streamState"],
                    "properties": {"streamState": {"type": "string", "enum": ["SEALED"]}}},
    "Scale": {"type": "object", "required": ["sealedSegments", "newRanges"], "properties": {
        "sealedSegments": {"type": "array", "minItems": 1, "items": {"type": "integer", "minimum": 0}},
        "newRanges": {"type": "array", "minItems": 1,
                      "items": {"type": "array", "minItems": 2, "maxItems": 2,
                                "items": {"type": "number", "minimum": 0, "maximum": 1}}}}},
    "Truncate": {"type": "object", "required": ["streamCut"], "properties": {
        "streamCut": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0},
                      "description": "segment id (as a string) -> offset"}}},
    "Transactions": {"type": "object", "required": ["transactions"], "properties": {"transactions": {
        "type": "array", "items": {"type": "object",
                                   "required": ["transactionId", "status", "epoch", "creationTime"],
                                   "properties": {"transactionId": {"type": "string"}, "status": {"type": "string"},
                                                  "epoch": {"type": "integer"},
                                                  "creationTime": {"type": "integer"},
                                                  "leaseExpiryTime": {"type": "integer"},
                                                  "writerId": {"type": "string"}}}}}},
    "ReaderGroupList": {"type": "object", "required": ["readerGroups"], "properties": {"readerGroups": {
        "type": "array", "items": {"type": "object", "required": ["readerGroupName"],
                                   "properties": {"readerGroupName": NAME}}}}},
    "ReaderGroup": {"type": "object",
                    "required": ["scopeName", "readerGroupName", "readerGroupId", "generation", "streams", "lagBytes"],
                    "properties": {"scopeName": NAME, "readerGroupName": NAME, "readerGroupId": {"type": "string"},
                                   "generation": {"type": "integer"},
                                   "streams": {"type": "array", "items": {"type": "string"}},
                                   "startingCuts": {"type": "object"}, "endingCuts": {"type": "object"},
                                   "retentionType": {"type": "string"},
                                   "lagBytes": {"type": "object", "additionalProperties": {"type": "integer"},
                                                "description": "stream -> bytes behind the tail (-1: the group "
                                                               "reports no position)"}}},
    "KeyValueTableList": {"type": "object", "required": ["kvtables"], "properties": {"kvtables": {
        "type": "array", "items": {"type": "object", "required": ["scopeName", "kvtName"],
                                   "properties": {"scopeName": NAME, "kvtName": NAME}}}}},
    "NewKeyValueTable": {"type": "object", "required": ["kvtName", "partitionCount", "primaryKeyLength"],
                         "properties": {"kvtName": NAME, "partitionCount": {"type": "integer", "minimum": 1},
                                        "primaryKeyLength": {"type": "integer", "minimum": 1},
                                        "secondaryKeyLength": {"type": "integer", "minimum": 0}}},
    "KeyValueTable": {"type": "object",
                      "required": ["scopeName", "kvtName", "partitionCount", "primaryKeyLength", "partitions"],
                      "properties": {"scopeName": NAME, "kvtName": NAME, "partitionCount": {"type": "integer"},
                                     "primaryKeyLength": {"type": "integer"},
                                     "secondaryKeyLength": {"type": "integer"},
                                     "partitions": {"type": "array", "items": {"type": "object"}}}},
    "Cluster": {"type": "object", "required": ["containerCount", "segmentStores", "controllers"], "properties": {
        "containerCount": {"type": "integer"},
        "segmentStores": {"type": "array", "items": {"type": "object", "required": ["address", "containers"],
                                                     "properties": {"address": {"type": "string"},
                                                                    "containers": {"type": "array",
                                                                                   "items": {"type": "integer"}}}}},
        "controllers": {"type": "array", "items": {"type": "object", "required": ["address"],
                                                   "properties": {"address": {"type": "string"},
                                                                  "leader": {"type": "boolean"}}}}}},
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "Tributary controller admin API", "version": "1",
             "description": "Scopes, streams, reader groups, key-value tables and the cluster (docs/rest.md)."},
    "paths": {
        "/v1/scopes": {
            "get": {"operationId": "listScopes", "responses": {"200": _json(_ref("ScopeList"), "Every scope"),
                                                              **_errors()}},
            "post": {"operationId": "createScope", "requestBody": _body(_ref("Scope")),
                     "responses": {"201": _json(_ref("Scope"), "Created"), **_errors(400, 409)}}},
        "/v1/scopes/{scope}": {
            "parameters": [SCOPE],
            "get": {"operationId": "getScope", "responses": {"200": _json(_ref("Scope"), "The scope"),
                                                            **_errors(400, 404)}},
            "delete": {"operationId": "deleteScope",
                       "parameters": [{"name": "recursive", "in": "query", "schema": {"type": "boolean"}}],
                       "responses": {"204": {"description": "Deleted"}, **_errors(400, 404, 409, 412, 504)}}},
        "/v1/scopes/{scope}/streams": {
            "parameters": [SCOPE],
            "get": {"operationId": "listStreams",
                    "parameters": [{"name": "tag", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": _json(_ref("StreamList"), "The scope's streams"), **_errors(400, 404)}},
            "post": {"operationId": "createStream", "requestBody": _body(_ref("NewStream")),
                     "responses": {"201": _json(_ref("Stream"), "Created"), **_errors(400, 404, 409)}}},
        "/v1/scopes/{scope}/streams/{stream}": {
            "parameters": [SCOPE, STREAM],
            "get": {"operationId": "getStream", "responses": {"200": _json(_ref("Stream"), "The stream"),
                                                             **_errors(400, 404, 409)}},
            "put": {"operationId": "updateStream", "requestBody": _body(_ref("StreamConfiguration")),
                    "responses": {"200": _json(_ref("Stream"), "Updated"), **_errors(400, 404, 409, 504)}},
            "delete": {"operationId": "deleteStream",
                       "responses": {"204": {"description": "Deleted"}, **_errors(400, 404, 409, 412, 504)}}},
        "/v1/scopes/{scope}/streams/{stream}/state": {
            "parameters": [SCOPE, STREAM],
            "put": {"operationId": "sealStream", "requestBody": _body(_ref("StreamState")),
                    "responses": {"200": _json(_ref("StreamState"), "Sealed"), **_errors(400, 404, 409, 504)}}},
        "/v1/scopes/{scope}/streams/{stream}/scale": {
            "parameters": [SCOPE, STREAM],
            "post": {"operationId": "scaleStream", "requestBody": _body(_ref("Scale")),
                     "responses": {"200": _json(_ref("Stream"), "Scaled"), **_errors(400, 404, 409, 504)}}},
        "/v1/scopes/{scope}/streams/{stream}/truncate": {
            "parameters": [SCOPE, STREAM],
            "post": {"operationId": "truncateStream", "requestBody": _body(_ref("Truncate")),
                     "responses": {"200": _json(_ref("Stream"), "Truncated"), **_errors(400, 404, 409, 504)}}},
        "/v1/scopes/{scope}/streams/{stream}/segments": {
            "parameters": [SCOPE, STREAM],
            "get": {"operationId": "getSegments", "responses": {
                "200": _json(_ref("SegmentList"), "The current segments with their sizes"),
                **_errors(400, 404, 409)}}},
        "/v1/scopes/{scope}/streams/{stream}/epochs": {
            "parameters": [SCOPE, STREAM],
            "get": {"operationId": "getEpochs",
                    "parameters": [{"name": "limit", "in": "query",
                                    "schema": {"type": "integer", "minimum": 1, "maximum": 10000}}],
                    "responses": {"200": _json(_ref("Epochs"), "The scaling history, newest epochs"),
                                  **_errors(400, 404)}}},
        "/v1/scopes/{scope}/streams/{stream}/transactions": {
            "parameters": [SCOPE, STREAM],
            "get": {"operationId": "getTransactions", "responses": {
                "200": _json(_ref("Transactions"), "Its transactions"), **_errors(400, 404)}}},
        "/v1/scopes/{scope}/readergroups": {
            "parameters": [SCOPE],
            "get": {"operationId": "listReaderGroups", "responses": {
                "200": _json(_ref("ReaderGroupList"), "The scope's reader groups"), **_errors(400, 404)}}},
        "/v1/scopes/{scope}/readergroups/{group}": {
            "parameters": [SCOPE, GROUP],
            "get": {"operationId": "getReaderGroup", "responses": {
                "200": _json(_ref("ReaderGroup"), "The reader group and its lag"), **_errors(400, 404)}}},
        "/v1/scopes/{scope}/kvtables": {
            "parameters": [SCOPE],
            "get": {"operationId": "listKeyValueTables", "responses": {
                "200": _json(_ref("KeyValueTableList"), "The scope's key-value tables"), **_errors(400, 404)}},
            "post": {"operationId": "createKeyValueTable", "requestBody": _body(_ref("NewKeyValueTable")),
                     "responses": {"201": _json(_ref("KeyValueTable"), "Created"), **_errors(400, 404, 409)}}},
        "/v1/scopes/{scope}/kvtables/{table}": {
            "parameters": [SCOPE, TABLE],
            "get": {"operationId": "getKeyValueTable", "responses": {
                "200": _json(_ref("KeyValueTable"), "The table"), **_errors(400, 404)}},
            "delete": {"operationId": "deleteKeyValueTable", "responses": {
                "204": {"description": "Deleted"}, **_errors(400, 404, 409, 504)}}},
        "/v1/cluster": {
            "get": {"operationId": "getCluster", "responses": {
                "200": _json(_ref("Cluster"), "Segment stores, their containers, controllers"), **_errors()}}},
    },
    "components": {"schemas": SCHEMAS},
}
